# 05_structure.sh - the code's shape (sourced by tests/scripts/run_all.sh after make all):
# every file -> file dependency of firmware/, configgen/, audit/ and dataprep/ (symbols from the
# objects, #include "..." from the sources) follows the layer order of tests/layers.txt with
# no circle, and no function is longer than its limit. `make layers` prints the same.
check "layers: no upward dependency and no circle (tests/layers.txt)" \
  python3 tests/scripts/structure.py layers
check "no function over tests/layers.txt's max_function_lines" \
  python3 tests/scripts/structure.py funcs
