#!/bin/sh
# Offline stand-in for Bazel's coverage tools: coverage is not supported.
echo "bazel coverage is not supported in this offline workspace" >&2
exit 1
