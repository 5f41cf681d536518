#!/usr/bin/env bash
# Runs the checks named on the command line (all by default) and prints TAP.
set -u
cd "$(dirname "$0")/.."
check() {
    local name=$1 input=$2 expected=$3 cmd=$4 got
    got=$(printf '%b' "$input" | bash "bin/$cmd")
    n=$((n + 1))
    if [ "$got" == "$expected" ]; then
        echo "ok $n - $name"
    else
        echo "not ok $n - $name (expected '$expected', got '$got')"
        failed=1
    fi
}
n=0
failed=0
want=${1:-all}
[ "$want" = all ] || [ "$want" = trim ] && check "trim spaces and tabs" '\t  hi there \t' 'hi there' trim.sh
[ "$want" = all ] || [ "$want" = upper ] && check "upper case z" 'fizz buzz' 'FIZZ BUZZ' upper.sh
[ "$want" = all ] || [ "$want" = count ] && check "skip empty lines" 'a\n\nb\n' '2' count.sh
echo "1..$n"
exit $failed
