# 50_reference.sh - the PyTorch reference itself (sourced by run_all.sh). Runs only where
# Debian's python3-torch is installed for /usr/bin/python3: the goldens are committed so the
# other tests never need torch, and a machine without it skips these two checks (it says
# so; they are not counted).
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  check "reference self-tests (gradcheck of every op, recurrent vs chunked GDN, layouts)" \
      /usr/bin/python3 tests/reference/test_reference.py
  goldens_reproduce() {
    local d=$QT_TMP/refcopy blas=/usr/lib/x86_64-linux-gnu/blas/libblas.so.3
    mkdir -p $d/tests && cp -r tests/reference tests/golden $d/tests/ && cp -r configgen $d/
    [ -f $blas ] || blas=
    # every file the generator writes is newer than the stamp: none is left as copied
    touch $d/stamp
    # two worker processes, one per core (as make goldens)
    LD_PRELOAD=$blas /usr/bin/python3 $d/tests/reference/make_goldens.py --jobs 2 > /dev/null || return 1
    local stale
    stale=$(cd $d && find tests/golden -type f ! -name SPEC.md ! -newer stamp)
    [ -z "$stale" ] || { echo "not regenerated (left as copied):"; echo "$stale"; return 1; }
    diff -rq tests/golden $d/tests/golden && echo "regenerated goldens are byte-identical"
  }
  check "make goldens reproduces the committed goldens byte for byte" goldens_reproduce
else
  echo "SKIP reference checks: /usr/bin/python3 has no torch (apt-get install python3-torch)"
fi
