#!/usr/bin/env bash
cd /work/main
for i in 1 2 3; do
  .venv/bin/python /work/runs/thp/start.py
  GLIBC_TUNABLES=glibc.malloc.hugetlb=1 .venv/bin/python /work/runs/thp/start.py
done
