#!/usr/bin/env bash
# Prints its input with leading and trailing blanks removed.
sed -e 's/^ *//' -e 's/ *$//'
