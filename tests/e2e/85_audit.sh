# 85_audit.sh - reproducibility audits (issue 9): the run manifest, the data hash in
# checkpoints and its resume check, and qtrain-audit's verdicts (sourced by run_all.sh).
#
# One set of short runs of the default model on the embedded corpus (3 steps each), shared
# by the checks: A and B identical (A saves one file, B a sharded directory), C another
# seed; each check then asks qtrain-audit and tests its verdict and exit status.
AU=build/audit/qtrain-audit
AQ=build/default/qtrain
AD=$QT_TMP/audit; rm -rf $AD; mkdir -p $AD
$AQ steps=3 seed=3 metrics=$AD/a.jsonl save=$AD/a.safetensors dump_grads=$AD/ga.safetensors 2> $AD/a.err
$AQ steps=3 seed=3 metrics=$AD/b.jsonl save=$AD/bdir dump_grads=$AD/gb.safetensors 2> $AD/b.err
$AQ steps=3 seed=4 metrics=$AD/c.jsonl dump_grads=$AD/gc.safetensors 2> $AD/c.err

audit_manifest() {
  local m; m=$(head -n 1 $AD/a.jsonl)
  case $m in '{"manifest":"qtrain-1","start_step":0,"end_step":3,"run":"default",'*) ;; *) echo "first line: ${m:0:200}"; return 1 ;; esac
  local plan; plan=$(grep -o 'plan 0x[0-9a-f]*' $AD/a.err | head -1 | cut -c6-)
  for want in "\"plan_hash\":\"$plan\"" '"seed":3' '"ranks":1' '"kind":"glibc+mpich"' \
              '"path":"(embedded corpus)","bytes":' '"config":{"run_name":"default"' \
              '"base_emb_dim":"128"' '"checkpoint":null' '"compiler":"gcc '; do
    grep -qF -- "$want" <<< "$m" || { echo "manifest lacks $want"; return 1; }
  done
  # the parsed manifest: only the arguments differ between A and B
  $AU runs $AD/a.jsonl $AD/b.jsonl > $AD/ab.txt || { cat $AD/ab.txt; return 1; }
  sed -n '/^manifests:/,/^steps/p' $AD/ab.txt
  [ "$(sed -n '/^manifests:/,/^steps/p' $AD/ab.txt | grep -c '^  [a-z]')" -eq 1 ] && grep -q '^  args ' $AD/ab.txt
}
check "audit: metrics start with a run manifest (plan hash, seed, build, data, config), parsed by qtrain-audit" audit_manifest

audit_identical() {
  $AU runs $AD/a.jsonl $AD/b.jsonl > $AD/ab.txt; local rc=$?
  tail -n 1 $AD/ab.txt
  [ $rc -eq 0 ] && [ "$(tail -n 1 $AD/ab.txt)" = "bit-identical over 3 steps" ]
}
check "audit runs: two identical runs -> bit-identical over 3 steps, exit 0" audit_identical

audit_seed() {
  $AU runs $AD/a.jsonl $AD/c.jsonl > $AD/ac.txt; local rc=$?
  grep -E '^  seed|diverges' $AD/ac.txt
  [ $rc -eq 1 ] && grep -q '^  seed  *3 -> 4$' $AD/ac.txt &&
    [ "$(tail -n 1 $AD/ac.txt)" = "diverges at step 0 (loss bits and fingerprint differ)" ]
}
check "audit runs: another seed -> manifest names seed 3 -> 4, diverges at step 0, exit 1" audit_seed

audit_sharded_vs_file() {
  $AU ckpt $AD/a.safetensors $AD/bdir > $AD/ck.txt; local rc=$?
  head -n 2 $AD/ck.txt; tail -n 1 $AD/ck.txt
  [ $rc -eq 0 ] && grep -q '^bit-identical: [0-9]* tensors$' $AD/ck.txt &&
    grep -q "data_hash 0x" $AD/ck.txt
}
check "audit ckpt: a sharded directory and a single file of the same state are bit-identical" audit_sharded_vs_file

audit_flipped_bit() {
  cp $AD/a.safetensors $AD/flip.safetensors
  # flip the lowest mantissa bit of element 37 of model.layers.2.mlp.shared_expert.up_proj.weight
  local want; want=$(python3 - $AD/flip.safetensors <<'PY'
import json, struct, sys
f = open(sys.argv[1], 'r+b'); n = struct.unpack('<Q', f.read(8))[0]; h = json.loads(f.read(n))
name = 'model.layers.2.mlp.shared_expert.up_proj.weight'; t = h[name]; k = 37
off = 8 + n + t['data_offsets'][0] + 4 * k; f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 1]))
cols = t['shape'][1]; print('%s %s [%d,%d] %d' % (name, 'x'.join(map(str, t['shape'])), k // cols, k % cols, k))
PY
) || return 1
  $AU ckpt $AD/a.safetensors $AD/flip.safetensors > $AD/flip.txt; local rc=$?
  cat $AD/flip.txt | grep -v '^  tensor'
  set -- $want
  [ $rc -eq 1 ] || { echo "exit $rc, expected 1"; return 1; }
  # columns: tensor, shape, differing elements (1), max ulp (1), ..., the element
  grep "^  $1 " $AD/flip.txt | awk '$3 == 1 && $4 == 1' | grep -qF "$3 (flat $4)" ||
    { echo "expected $want"; return 1; }
  tail -n 1 $AD/flip.txt | grep -q "^checkpoint differ: 1 of [0-9]* common tensors differ"
  # the sharded directory against the flipped file finds the same element
  $AU ckpt $AD/bdir $AD/flip.safetensors | grep "^  $1 " | grep -qF "$3 (flat $4)"
}
check "audit ckpt: one flipped bit is found: tensor named, element index, 1 ulp, exit 1" audit_flipped_bit

audit_grads() {
  $AU grads $AD/ga.safetensors $AD/gb.safetensors > $AD/g1.txt || { cat $AD/g1.txt; return 1; }
  $AU grads $AD/ga.safetensors $AD/gc.safetensors > $AD/g2.txt; local rc=$?
  tail -n 1 $AD/g1.txt; tail -n 2 $AD/g2.txt
  [ $rc -eq 1 ] && grep -q '^earliest differing layer: ' $AD/g2.txt
}
check "audit grads: dump_grads files of identical runs equal, of another seed differ (earliest layer named)" audit_grads

audit_data_hash() {
  python3 -c "import struct,sys; b=open('firmware/io/corpus.txt','rb').read()[:60000]; open(sys.argv[1],'wb').write(struct.pack('<%dH'%len(b),*b))" $AD/other.u16 || return 1
  local ck; ck=$(grep -o '"data_hash":"0x[0-9a-f]*"' $AD/bdir/model.safetensors.index.json | cut -d'"' -f4)
  local mine; mine=$(head -n 1 $AD/a.jsonl | grep -o '"data":{[^}]*}' | grep -o '0x[0-9a-f]*')
  [ -n "$ck" ] && [ "$ck" = "$mine" ] || { echo "index data_hash '$ck', manifest '$mine'"; return 1; }
  $AQ steps=4 load=$AD/bdir data=$AD/other.u16 data_dtype=uint16 eval_holdout=32 metrics=$AD/d.jsonl 2> $AD/d.err && { echo "resumed on other data"; return 1; }
  cat $AD/d.err | grep -v '^qtrain: \(run\|peak\|resuming\)'
  grep -q "was trained on data of hash $ck, but $AD/other.u16 has hash 0x[0-9a-f]*; refusing" $AD/d.err || return 1
  [ ! -e $AD/d.jsonl ] || { echo "a metrics file was written"; return 1; }
  $AQ steps=4 load=$AD/bdir data=$AD/other.u16 data_dtype=uint16 eval_holdout=32 metrics=$AD/d.jsonl allow_data_change=1 2> $AD/d.err || { cat $AD/d.err; return 1; }
  head -n 1 $AD/d.jsonl | grep -o '"note":"[^"]*"'
  head -n 1 $AD/d.jsonl | grep -q "\"note\":\"allow_data_change=1: checkpoint data_hash $ck, this run's data hash 0x"
}
check "audit: resume on data of another hash refused naming both hashes; allow_data_change=1 notes it in the manifest" audit_data_hash

audit_resume_manifests() {
  # A (3 steps, saved) resumed to 5 appends a second manifest; it matches an uninterrupted run
  cp $AD/a.jsonl $AD/r.jsonl
  $AQ steps=5 load=$AD/a.safetensors metrics=$AD/r.jsonl 2> /dev/null || return 1
  $AQ steps=5 seed=3 metrics=$AD/full.jsonl 2> /dev/null || return 1
  [ "$(grep -c '^{"manifest"' $AD/r.jsonl)" -eq 2 ] || return 1
  sed -n 5p $AD/r.jsonl | grep -q '^{"manifest":"qtrain-1","start_step":3,"end_step":5,.*"checkpoint":{"path":"'$AD'/a.safetensors","hash":"0x[0-9a-f]*","files":1,"data_hash":"0x' || { echo "line 5: $(sed -n 5p $AD/r.jsonl | head -c 300)"; return 1; }
  $AU runs $AD/full.jsonl $AD/r.jsonl > $AD/r.txt; local rc=$?
  grep manifests $AD/r.txt; tail -n 1 $AD/r.txt
  [ $rc -eq 0 ] && [ "$(tail -n 1 $AD/r.txt)" = "bit-identical over 5 steps" ]
}
check "audit: a resumed run appends its own manifest (start step, checkpoint hash); bit-identical to an uninterrupted run" audit_resume_manifests

audit_plot() {
  rm -f $AD/p.png
  $AU plot $AD/a.jsonl $AD/c.jsonl -o $AD/p.png || return 1
  [ "$(head -c 8 $AD/p.png | od -An -tx1 | tr -d ' ')" = "89504e470d0a1a0a" ] || { echo "not a PNG"; return 1; }
  ls -l $AD/p.png | awk '{print $5, "bytes"}'
  [ "$(stat -c %s $AD/p.png)" -gt 20000 ]
}
check "audit plot: two runs overlaid into a PNG (gnuplot)" audit_plot

# plot -o never replaces a file without --overwrite (a file of the user's, "keep me", stays
# byte for byte, exit 2, nothing else left beside it); with --overwrite it is replaced.
audit_plot_keep() {
  local o=$AD/keep.png
  rm -f $AD/keep.*; printf 'keep me\n' > $o; cp $o $AD/keep.orig
  $AU plot $AD/a.jsonl -o $o 2> $AD/keep.err; local rc=$?
  [ $rc -eq 2 ] || { echo "exit $rc, expected 2"; cat $AD/keep.err; return 1; }
  grep -F "qtrain-audit: plot -o $o: the file exists; give --overwrite to replace it, or another path" $AD/keep.err \
    || { cat $AD/keep.err; return 1; }
  cmp $o $AD/keep.orig || { echo "the existing file changed"; return 1; }
  [ "$(ls $AD | grep -c '^keep\.png')" -eq 1 ] || { ls $AD; return 1; }
  $AU plot $AD/a.jsonl -o $o --overwrite > /dev/null || return 1
  [ "$(head -c 4 $o | od -An -tx1 | tr -d ' ')" = "89504e47" ] || { echo "not replaced by a PNG"; return 1; }
  echo "refused without --overwrite, replaced with it"
}
check "audit plot: -o refuses an existing file (kept byte-identical) unless --overwrite" audit_plot_keep

# audit22: `plot m.jsonl -o m.jsonl --overwrite` replaced the run's metrics with the PNG. An -o
# that is one of the metrics files plotted (by name, or a hard link to it) is refused, even
# with --overwrite, and the file stays byte for byte.
audit_plot_input() {
  rm -f $AD/in.*; cp $AD/a.jsonl $AD/in.jsonl && ln $AD/in.jsonl $AD/in.link.png || return 1
  local o
  for o in $AD/in.jsonl $AD/in.link.png; do
    $AU plot $AD/b.jsonl $AD/in.jsonl -o $o --overwrite 2> $AD/in.err; local rc=$?
    [ $rc -eq 2 ] && grep -F "qtrain-audit: plot -o $o is the metrics file $AD/in.jsonl being plotted; refusing to write the picture over it, even with --overwrite" $AD/in.err ||
      { echo "-o $o: exit $rc"; cat $AD/in.err; return 1; }
    cmp $AD/in.jsonl $AD/a.jsonl || { echo "the metrics file changed"; return 1; }
  done
}
check "audit plot: -o naming a metrics file being plotted is refused even with --overwrite (the file kept)" audit_plot_input

# The plot's title names the runs (the manifest's "run"), each with its file. The script
# gnuplot reads is captured through QT_AUDIT_GNUPLOT (the command that renders).
audit_plot_title() {
  rm -f $AD/t.png $AD/t.gp
  QT_AUDIT_GNUPLOT="tee $AD/t.gp | gnuplot" $AU plot $AD/a.jsonl $AD/c.jsonl -o $AD/t.png > /dev/null || return 1
  grep -F "title 'default (a.jsonl) vs default (c.jsonl)'" $AD/t.gp || { grep title $AD/t.gp | head -3; return 1; }
  grep -qF "title 'A: default (a.jsonl)'" $AD/t.gp || return 1
}
check "audit plot: titled with the run names of the manifests" audit_plot_title

# A run with the MTP head (issue 31): the loss panel also draws its mtp_loss; a run without
# the head draws none.
audit_plot_mtp() {
  rm -f $AD/mtp.png $AD/mtp.gp $AD/nomtp.gp
  timeout 60 build/mtp-next-1r/qtrain steps=3 seed=3 data=tests/golden/e2e/test-next-tiny/tokens.npy \
    metrics=$AD/mtp.jsonl 2> /dev/null || return 1
  QT_AUDIT_GNUPLOT="tee $AD/mtp.gp | gnuplot" $AU plot $AD/mtp.jsonl -o $AD/mtp.png > /dev/null || return 1
  [ -s $AD/mtp.png ] || return 1
  grep -qF "using 1:6 with lines lw 1 dt 4 lc rgb '#8c564b' title 'A: mtp_loss (MTP head CE)'" $AD/mtp.gp ||
    { grep plot $AD/mtp.gp | head -2; return 1; }
  QT_AUDIT_GNUPLOT="tee $AD/nomtp.gp > /dev/null" $AU plot $AD/a.jsonl -o $AD/nomtp.png > /dev/null
  [ -s $AD/nomtp.gp ] && ! grep -q mtp_loss $AD/nomtp.gp
}
check "audit plot: the loss panel draws mtp_loss for a run with the MTP head (and not without)" audit_plot_mtp

# Eval rows with the MTP head's acceptance rate (mtp_eval_target_module): a fifth panel
# (three rows) draws it for the run that has it, named with its depth; a run without it
# keeps the four panels. The rows are a run's own with the eval fields appended as qtrain
# writes them (docs/cli.md), the second eval's rate missing as in a file cut by a resume.
audit_plot_acceptance() {
  local d=$AD/acc; rm -rf $d; mkdir -p $d
  cp $AD/a.jsonl $d/acc.jsonl
  printf '%s\n' '{"step":0,"eval_loss":5.5,"eval_mtp_acceptance_rate_percent":12.5,"eval_mtp_target_module":2,"eval_mtp_accepted":5,"eval_mtp_accept_positions":40}' \
    '{"step":1,"eval_loss":5.25}' \
    '{"step":2,"eval_loss":5,"eval_mtp_acceptance_rate_percent":37.5,"eval_mtp_target_module":2,"eval_mtp_accepted":15,"eval_mtp_accept_positions":40}' >> $d/acc.jsonl
  QT_AUDIT_GNUPLOT="tee $d/acc.gp | gnuplot" $AU plot $d/acc.jsonl $AD/c.jsonl -o $d/acc.png > /dev/null || return 1
  [ -s $d/acc.png ] || return 1
  grep -qF "set multiplot layout 3,2 " $d/acc.gp &&
    grep -qF "plot '/tmp/qtrain-audit-" $d/acc.gp &&
    grep -qF "index 1 using 1:3 with linespoints pt 7 lw 2 lc rgb '#1f77b4' title 'A: acceptance rate, depth 2'" $d/acc.gp ||
    { grep -n 'multiplot\|acceptance' $d/acc.gp; return 1; }
  ! grep -q "title 'B: acceptance" $d/acc.gp || { echo "an acceptance rate for the run without one"; return 1; }
  # the data the panel reads (a copy of the temporary file, taken while gnuplot would run):
  # the eval block is step+1, eval loss, rate; nan where an eval row has none
  QT_AUDIT_GNUPLOT="cat > $d/x.gp; cp \$(grep -o '/tmp/qtrain-audit-[A-Za-z0-9]*' $d/x.gp | head -n 1) $d/x.dat" \
    $AU plot $d/acc.jsonl -o $d/acc2.png > /dev/null || return 1
  [ "$(awk 'NF == 3' $d/x.dat | tr '\n' ';')" = "1 5.5 12.5;2 5.25 nan;3 5 37.5;" ] ||
    { echo "eval block:"; awk 'NF == 3' $d/x.dat; return 1; }
  QT_AUDIT_GNUPLOT="tee $d/noacc.gp > /dev/null" $AU plot $AD/a.jsonl -o $d/noacc.png > /dev/null
  grep -qF "set multiplot layout 2,2 " $d/noacc.gp && ! grep -q acceptance $d/noacc.gp ||
    { echo "a run without acceptance rates gained a panel"; return 1; }
}
check "audit plot: eval rows with the MTP acceptance rate get their own panel (and only then)" audit_plot_acceptance

# The manifest records the eval source (issue 33): eval_data= with its bytes and XXH64 hash
# (as data=), eval_holdout=N with its windows; `qtrain-audit runs` shows them in its diff.
audit_eval_source() {
  local d=$QT_TMP/audit-eval g=tests/golden/e2e/test-next-tiny/tokens.npy out
  rm -rf "$d"; mkdir -p "$d"
  timeout 120 build/eval-next-1r/qtrain data=$g eval_data=$g steps=2 metrics=$d/a.jsonl > /dev/null 2>&1 &&
    timeout 120 build/eval-next-1r/qtrain data=$g eval_holdout=4 steps=2 metrics=$d/b.jsonl > /dev/null 2>&1 || return 1
  head -n 1 "$d/a.jsonl" | grep -q "\"eval\":{\"source\":\"eval_data\",\"path\":\"$g\",\"bytes\":$(stat -c %s $g),\"hash\":\"0x" ||
    { echo "a: $(head -n 1 "$d/a.jsonl" | grep -o '"eval":[^}]*}')"; return 1; }
  head -n 1 "$d/b.jsonl" | grep -q '"eval":{"source":"eval_holdout","holdout":4,"windows":4,"batches":1}' || return 1
  out=$(build/audit/qtrain-audit runs "$d/a.jsonl" "$d/b.jsonl") || return 1
  echo "$out" | grep -E "^  eval\.(source|hash|holdout) " | tee /dev/stderr | wc -l | grep -qx 3
}
check "manifest eval source: eval_data path/bytes/hash, eval_holdout N; qtrain-audit runs diffs them" audit_eval_source

# The plot's names and output path go into the gnuplot script inside single quotes, one
# command a line: a manifest "run" holding a newline (JSON "\n") then a gnuplot command
# (system "...") ran that command when the file was plotted, and an -o path with a quote
# broke the script. Names are drawn with '?' for control characters; a quote in the -o path
# is escaped (''); an -o path with a control character is refused, naming it.
audit_plot_hostile() {
  local d=$AD/hostile; rm -rf $d; mkdir -p $d
  { printf '{"manifest":"qtrain-1","run":"x\\nsystem \\"touch %s/pwned\\"\\nprint \\"y"}\n' "$d"
    grep -v '"manifest"' $AD/a.jsonl; } > $d/evil.jsonl
  $AU plot $d/evil.jsonl -o "$d/it's.png" > $d/out.txt 2> $d/err.txt || { cat $d/err.txt; return 1; }
  [ ! -e $d/pwned ] || { echo "the manifest's run name ran a command in gnuplot"; return 1; }
  [ -s "$d/it's.png" ] || { echo "no plot at a path with a quote"; cat $d/err.txt; return 1; }
  $AU plot $AD/a.jsonl -o "$d/a
b.png" 2> $d/err.txt && { echo "accepted an -o path with a newline"; return 1; }
  grep -F "holds a control character" $d/err.txt || { cat $d/err.txt; return 1; }
  [ -z "$(ls $d | grep -v -x -e evil.jsonl -e "it's.png" -e out.txt -e err.txt)" ] || { echo "left:"; ls $d; return 1; }
}
check "audit plot: a run name with a newline runs nothing in gnuplot; a quote in -o is plotted, a control character refused" audit_plot_hostile

# A directory or a FIFO given as a metrics file: runs read a directory as an empty file
# (verdict "no common steps", exit 1, as if two runs differed) and waited forever on a
# FIFO. Both are errors (exit 2) naming the path, at once.
audit_not_a_file() {
  local d=$AD/notfile; rm -rf $d; mkdir -p $d/dir && mkfifo $d/fifo || return 1
  local bad rc
  for bad in $d/dir $d/fifo; do
    timeout 20 $AU runs $bad $AD/a.jsonl > $d/out 2> $d/err; rc=$?
    [ $rc -eq 2 ] || { echo "runs $bad: exit $rc"; cat $d/out $d/err | tail -n 3; return 1; }
    grep -F "qtrain-audit: $bad: is not a regular file" $d/err || { cat $d/err; return 1; }
    timeout 20 $AU plot $bad -o $d/p.png 2> $d/err && { echo "plot $bad accepted"; return 1; }
    grep -qF "qtrain-audit: $bad: is not a regular file" $d/err || { cat $d/err; return 1; }
  done
}
check "audit runs/plot: a directory or a FIFO as a metrics file is an error naming it (exit 2), never a verdict or a wait" audit_not_a_file

# audit23: ckpt and grads on the wrong files. A gradient dump given to ckpt (or a qtrain
# checkpoint to grads) was compared name by name and reported "differ" (exit 1) with an
# "earliest differing layer", as if two runs had parted; a file that is not safetensors
# (a metrics file) was named with a "qtrain:" prefix and an insane header length. Each is
# an error now (exit 2) naming the file and what to give; the plot's -o in a directory that
# does not exist names OUT, not its temporary.
audit_wrong_files() {
  local d=$AD/wrong rc; rm -rf $d; mkdir -p $d
  $AU ckpt $AD/a.safetensors $AD/ga.safetensors > $d/out 2> $d/err; rc=$?
  [ $rc -eq 2 ] && grep -qF "qtrain-audit: ckpt: $AD/ga.safetensors is a gradient dump (dump_grads=; __metadata__ content \"gradients\"), not a checkpoint: compare gradient dumps with qtrain-audit grads" $d/err \
    || { echo "ckpt A grads: exit $rc"; cat $d/err; tail -n 2 $d/out; return 1; }
  $AU grads $AD/bdir $AD/gb.safetensors > $d/out 2> $d/err; rc=$?
  [ $rc -eq 2 ] && grep -qF "qtrain-audit: grads: $AD/bdir is a qtrain checkpoint (__metadata__ format \"qtrain-1\"), not a gradient dump (dump_grads=): compare checkpoints with qtrain-audit ckpt" $d/err \
    || { echo "grads ckpt B: exit $rc"; cat $d/err; tail -n 2 $d/out; return 1; }
  $AU ckpt $AD/a.jsonl $AD/a.safetensors > $d/out 2> $d/err; rc=$?
  [ $rc -eq 2 ] && grep -qF "qtrain-audit: $AD/a.jsonl: not a safetensors file, or a truncated one: its first 8 bytes give a header length of " $d/err \
    || { echo "ckpt metrics: exit $rc"; cat $d/err; return 1; }
  $AU plot $AD/a.jsonl -o $d/none/x.png 2> $d/err && { echo "plot into a missing directory accepted"; return 1; }
  grep -qF "qtrain-audit: plot -o $d/none/x.png: cannot create the picture beside it" $d/err || { cat $d/err; return 1; }
  # the controls: the right command on each still compares
  $AU grads $AD/ga.safetensors $AD/gb.safetensors > /dev/null && $AU ckpt $AD/a.safetensors $AD/bdir > /dev/null
}
check "audit ckpt/grads: a gradient dump to ckpt, a checkpoint to grads, a metrics file to ckpt are errors naming the file (exit 2) (audit23)" audit_wrong_files

# audit24: plot writes the step lines to a temporary file in /tmp for gnuplot. A read-only
# /tmp was told only "/tmp/qtrain-audit-XXXXXX: Read-only file system" (no program, no
# reason), and a full /tmp failed with exit 2 and no message at all. Each now names the
# program, the file and what plot needs; nothing is written at -o. A private mount namespace
# (unshare -m) puts a read-only and a full tmpfs at /tmp for the one command (skipped where
# that is not allowed).
audit_plot_tmp() {
  local d=$AD/ptmp rc; rm -rf $d; mkdir -p $d; cp $AD/a.jsonl $d/a.jsonl
  unshare -m true 2> /dev/null && [ -d /mnt ] || { echo "skipped: unshare -m is not allowed here (not root?)"; return 0; }
  # inside the namespace: $d (under /tmp here) bound at /mnt/ad, then a tmpfs over /tmp
  local pre='mount -t tmpfs -o size=64k none /mnt && mkdir /mnt/ad && mount --bind "$0" /mnt/ad'
  unshare -m sh -c "$pre"' && mount -t tmpfs -o ro,size=64k none /tmp && exec "$@"' $d \
      $AU plot /mnt/ad/a.jsonl -o /mnt/ad/ro.png > /dev/null 2> $d/err; rc=$?
  [ $rc -eq 2 ] && grep -qE "^qtrain-audit: plot: cannot create its temporary data file /tmp/qtrain-audit-.*: Read-only file system; plot writes the step lines to a file in /tmp for gnuplot, so /tmp must be writable" $d/err ||
    { echo "read-only /tmp: exit $rc"; cat $d/err; return 1; }
  unshare -m sh -c "$pre"' && mount -t tmpfs -o size=4k none /tmp && head -c 4096 /dev/zero > /tmp/fill; exec "$@"' $d \
      $AU plot /mnt/ad/a.jsonl -o /mnt/ad/full.png > /dev/null 2> $d/err; rc=$?
  [ $rc -eq 2 ] && grep -qE "^qtrain-audit: plot: writing its temporary data file /tmp/qtrain-audit-.* failed: No space left on device" $d/err ||
    { echo "full /tmp: exit $rc"; cat $d/err; return 1; }
  [ "$(ls -A $d)" = "$(printf 'a.jsonl\nerr')" ] || { ls -A $d; return 1; }
  echo "read-only and full /tmp: named, exit 2, no picture"
}
check "audit plot: a read-only or full /tmp is an error naming the temporary file and what plot needs (it was silent)" audit_plot_tmp
