#!/usr/bin/env bash
# Prints its input in upper case.
tr 'a-y' 'A-Y'
