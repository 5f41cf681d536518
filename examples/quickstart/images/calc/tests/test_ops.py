import unittest

from calc import ops


class TestAdd(unittest.TestCase):
    def test_add(self):
        self.assertEqual(ops.add(2, 3), 5)


class TestSub(unittest.TestCase):
    def test_sub(self):
        self.assertEqual(ops.sub(5, 3), 2)


class TestDiv(unittest.TestCase):
    def test_true_division(self):
        self.assertAlmostEqual(ops.div(7, 2), 3.5)


class TestMean(unittest.TestCase):
    def test_mean(self):
        self.assertAlmostEqual(ops.mean([1, 2, 3, 4]), 2.5)

    def test_empty_mean_is_zero(self):
        self.assertEqual(ops.mean([]), 0.0)


class TestPow(unittest.TestCase):
    def test_pow(self):
        self.assertEqual(ops.power(2, 10), 1024)


class TestClamp(unittest.TestCase):
    def test_clamp_high(self):
        self.assertEqual(ops.clamp(12, 0, 10), 10)

    def test_clamp_inside(self):
        self.assertEqual(ops.clamp(5, 0, 10), 5)


if __name__ == "__main__":
    unittest.main()
