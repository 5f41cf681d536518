import unittest

from textkit import words


class TestSlugify(unittest.TestCase):
    def test_lowercase_and_dashes(self):
        self.assertEqual(words.slugify("Hello Big World"), "hello-big-world")


class TestCountWords(unittest.TestCase):
    def test_runs_of_spaces(self):
        self.assertEqual(words.count_words("a  b   c"), 3)


class TestWrap(unittest.TestCase):
    def test_lines_fill_the_width(self):
        self.assertEqual(words.wrap("aa bb cc", 5), ["aa bb", "cc"])


class TestTruncate(unittest.TestCase):
    def test_ellipsis(self):
        self.assertEqual(words.truncate("abcdefgh", 5), "ab...")


if __name__ == "__main__":
    unittest.main()
