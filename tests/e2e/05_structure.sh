# 05_structure.sh - the code's shape (sourced by tests/scripts/run_all.sh after make all):
# every file -> file dependency of firmware/, configgen/, audit/ and dataprep/ (symbols from the
# objects, #include "..." from the sources) follows the layer order of tests/layers.txt with
# no circle, and no function is longer than its limit; and the firmware's rules that the
# compiler does not check (tests/scripts/fw_rules.py). `make layers` prints the same.
check "layers: no upward dependency and no circle (tests/layers.txt)" \
  python3 tests/scripts/structure.py layers
check "no function over tests/layers.txt's max_function_lines" \
  python3 tests/scripts/structure.py funcs
check "every source file starts with a comment naming it" \
  python3 tests/scripts/fw_rules.py names
check "firmware: no heap call, no exit() below main (build/fw objects)" \
  python3 tests/scripts/fw_rules.py heap
check "firmware: one static module struct per file, no function-local static" \
  python3 tests/scripts/fw_rules.py statics
check "firmware: no recursion among direct calls" \
  python3 tests/scripts/fw_rules.py recursion
