#!/usr/bin/env bash
# Builds and runs every test of the workspace, several test binaries at a time.
#
# Why not plain `cargo test`: it runs one binary after another, and our binaries
# wait on the etcd and API servers they start between bursts of CPU, so one binary
# at a time left the two cores partly idle (three at a time: the test phase went
# from about 19 to under 13 minutes; the README has the figures). Each binary still
# runs exactly as `cargo test` runs it (its package directory as working directory,
# its own test threads), and prints the same output; only the binaries overlap.
#
# - Binaries whose tests start the real node (one per machine: they would queue on
#   its lock while holding a slot) run one after another in a lane of their own.
# - Longest first, from the times the previous run recorded in target/ (a fresh
#   checkout: scripts/test-times.txt); a binary with no time goes before the known
#   ones if it is an integration test, after them if it holds unit tests.
# - Every job runs even when one fails; the script fails if any did.
# - A crate's integration tests are one binary (tests/main.rs, a module per file, as
#   linking a binary per file cost more build time); each module runs as a job of its
#   own, as its file did when it was a binary; a main.rs with the line
#   `//! run-tests: one process` has its modules (but the real node's) run as one job
#   instead, with TENANTPLANE_ONE_PROCESS_THREADS test threads (default 3), so the
#   API servers its tests hand on to each other serve every module.
# - The lane's binaries run at normal priority and the other jobs at nice 10: the
#   lane is the longest chain, and the others fill in the CPU it leaves idle.
#
# TENANTPLANE_TEST_JOBS sets how many jobs run at once (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=${TENANTPLANE_TEST_JOBS:-3}
# Test threads of a binary whose modules run as one job (see split_modules).
one_process_threads=${TENANTPLANE_ONE_PROCESS_THREADS:-3}
out=target/test-run
times_file=target/test-times.txt
# A fresh checkout orders by the times committed beside this script (a full run's).
seed_times=scripts/test-times.txt
rm -rf "$out"
mkdir -p "$out/logs"

printf '==> building the tests\n'
cargo test --workspace --locked --no-run --message-format=json-render-diagnostics > "$out/build.json"

# One line per test binary (the profile says test: the tenantplane binary itself is
# built too, for the CLI tests): label, executable, package directory, kind, source.
field() { sed -n "s/.*\"$1\":\"\\([^\"]*\\)\".*/\\1/p" <<<"$2"; }
: > "$out/binaries"
while IFS= read -r line; do
  exe=$(field executable "$line")
  manifest=$(field manifest_path "$line")
  dir=$(dirname "$manifest")
  target=$(sed -n 's/.*"target":{[^}]*"name":"\([^"]*\)".*/\1/p' <<<"$line")
  kind=$(sed -n 's/.*"target":{"kind":\["\([^"]*\)".*/\1/p' <<<"$line")
  src=$(sed -n 's/.*"target":{[^}]*"src_path":"\([^"]*\)".*/\1/p' <<<"$line")
  label="$(basename "$dir")::$target"
  [[ $kind == test ]] || label="$label($kind)"
  printf '%s\t%s\t%s\t%s\t%s\n' "$label" "$exe" "$dir" "$kind" "$src" >> "$out/binaries"
done < <(grep '"reason":"compiler-artifact"' "$out/build.json" | grep '"executable":"' | grep '"profile":{[^}]*"test":true')
count=$(wc -l < "$out/binaries")
if ((count == 0)); then
  echo "no test binaries found in the build output" >&2
  exit 1
fi

known_times=$times_file
[[ -f $known_times ]] || known_times=$seed_times
previous_secs() { # seconds the label took last run, or empty
  [[ -f $known_times ]] || return 0
  awk -F'\t' -v l="$1" '$2 == l { print $1 }' "$known_times" | tail -n1
}

# Whether the tests in source file $1 start the real node: they go in the node lane.
starts_real_node() { grep -q 'RealNode' "$1" 2>/dev/null; }

# A merged integration-test binary (tests/main.rs, one module per former test file)
# runs as one job per module, labelled as that file's binary was, so the recorded
# times, the ordering and the node lane stay per module. Writes "module<TAB>source<TAB>names file"
# lines and one file of exact test names per module into $out/names/.
split_modules() { # label executable directory source
  local label=$1 exe=$2 dir=$3 src=$4 tests_dir names file f module module_src
  tests_dir=$(dirname "$src")
  names="$out/names/${label//[^A-Za-z0-9_.-]/_}"
  mkdir -p "$names"
  (cd "$dir" && "$exe" --list --format terse) > "$names.list"
  sed -n 's/^\([A-Za-z0-9_]*\)::\(.*\): test$/\1 \1::\2/p' "$names.list" |
    while read -r module name; do printf '%s\n' "$name" >> "$names/$module"; done
  # A file that main.rs does not declare would be compiled and run by nothing.
  for file in "$tests_dir"/*.rs; do
    [[ $(basename "$file") == main.rs ]] && continue
    if ! grep -q "^mod $(basename "$file" .rs);" "$src"; then
      echo "$label: $src does not declare $file" >&2
      return 1
    fi
  done
  # A test outside every module would run in no job: refuse rather than skip it.
  if grep -v '::' "$names.list" | grep -q ': test$'; then
    echo "$label: tests outside a module of $src:" >&2
    grep -v '::' "$names.list" | grep ': test$' >&2
    return 1
  fi
  local one_process=$names.one-process one_process_binary=false
  grep -q "^//! run-tests: one process" "$src" && one_process_binary=true
  for f in "$names"/*; do
    [[ -e $f ]] || continue
    module=$(basename "$f")
    module_src="$tests_dir/$module.rs"
    [[ -f $module_src ]] || module_src="$tests_dir/$module/mod.rs"
    # A binary marked "one process" runs its modules (but the node's) as one job, so
    # the API servers its tests hand on serve every module, not one.
    if $one_process_binary && ! starts_real_node "$module_src"; then
      [[ -s $one_process ]] || printf -- '--test-threads=%s\n' "$one_process_threads" > "$one_process"
      cat "$f" >> "$one_process"
      continue
    fi
    printf '%s\t%s\t%s\n' "$module" "$module_src" "$f"
  done
  [[ ! -s $one_process ]] || printf '(one process)\t%s\t%s\n' "$src" "$one_process"
}

# Jobs (seconds, label, executable, directory, names file or empty): the node lane,
# then each other binary or module, ordered longest first.
: > "$out/jobs"
: > "$out/node-lane"
lane_secs=0
add_job() { # label executable directory kind source names
  local label=$1 exe=$2 dir=$3 kind=$4 src=$5 names=$6 secs
  secs=$(previous_secs "$label")
  if starts_real_node "$src"; then
    printf '%s\t%s\t%s\t%s\n' "$label" "$exe" "$dir" "$names" >> "$out/node-lane"
    # A member with no recorded time puts the lane first.
    # printf, not print: awk prints a sum past 999999 as 1.00025e+06, which sort -n
    # reads as 1 and so ran the lane last.
    lane_secs=$(awk -v a="$lane_secs" -v b="${secs:-1000000}" 'BEGIN { printf "%.1f", a + b }')
    return
  fi
  if [[ -z $secs ]]; then
    if [[ $kind == test ]]; then secs=1000; else secs=0; fi
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$secs" "$label" "$exe" "$dir" "$names" >> "$out/jobs"
}
jobs_count=0
while IFS=$'\t' read -r label exe dir kind src; do
  if [[ $kind == test && $(basename "$src") == main.rs ]]; then
    split_modules "$label" "$exe" "$dir" "$src" > "$out/modules"
    while IFS=$'\t' read -r module module_src names; do
      add_job "$(basename "$dir")::$module" "$exe" "$dir" "$kind" "$module_src" "$names"
      jobs_count=$((jobs_count + 1))
    done < "$out/modules"
  else
    add_job "$label" "$exe" "$dir" "$kind" "$src" ""
    jobs_count=$((jobs_count + 1))
  fi
done < "$out/binaries"
[[ ! -s $out/node-lane ]] || printf '%s\tnode-lane\t\t\t\n' "$lane_secs" >> "$out/jobs"

run_binary() { # label executable directory [names file]: runs it (only those tests,
  # matched exactly, when a names file is given), then prints its output in one piece
  local label=$1 exe=$2 dir=$3 names=${4:-} start end rc=0
  local args=()
  [[ -z $names ]] || { mapfile -t args < "$names"; args=(--exact "${args[@]}"); }
  local log="$out/logs/${label//[^A-Za-z0-9_.-]/_}.log"
  start=$(date +%s.%N)
  (cd "$dir" && nice -n "${niceness:-0}" "$exe" "${args[@]}") > "$log" 2>&1 || rc=$?
  end=$(date +%s.%N)
  local secs
  secs=$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.1f", e - s }')
  {
    flock 9
    printf '     Running %s (%s)\n' "$label" "${exe#"$PWD"/}"
    cat "$log"
    if ((rc == 0)); then
      printf '    finished %s in %ss\n\n' "$label" "$secs"
    else
      printf '    FAILED %s (exit %s) in %ss\n\n' "$label" "$rc" "$secs"
    fi
    printf '%s\t%s\t%s\n' "$secs" "$label" "$rc" >> "$out/results"
  } 9> "$out/print.lock"
}

run_job() { # label executable directory names, or node-lane: its jobs one after another
  if [[ $1 == node-lane ]]; then
    local label exe dir names
    # On fd 3, so the test binaries do not get the list as their stdin.
    while IFS=$'\t' read -r -u 3 label exe dir names; do run_binary "$label" "$exe" "$dir" "$names"; done 3< "$out/node-lane"
  else
    # The lane is the critical path (its jobs cannot overlap): every other job
    # yields the CPU to it, and takes what the lane leaves idle while it waits.
    niceness=10 run_binary "$@"
  fi
}

printf '==> running %s test binaries as %s jobs, %s at a time\n\n' "$count" "$jobs_count" "$jobs"
started=$(date +%s)
: > "$out/results"
while IFS=$'\t' read -r _ label exe dir names; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  run_job "$label" "$exe" "$dir" "$names" &
done < <(sort -t$'\t' -k1,1nr "$out/jobs")
wait

# Doc tests are compiled per crate by rustdoc; cargo test runs them last, so do we.
doc_rc=0
cargo test --workspace --locked --doc || doc_rc=$?

elapsed=$(($(date +%s) - started))
cut -f1,2 "$out/results" > "$times_file"
ran=$(wc -l < "$out/results")
failed=$(awk -F'\t' '$3 != 0 { print "  " $2 " (exit " $3 ")" }' "$out/results")
summary=$(awk '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "%d passed, %d failed, %d ignored", p, f, i }' "$out"/logs/*.log)
printf '==> %s of %s jobs ran in %ss: %s\n' "$ran" "$jobs_count" "$elapsed" "$summary"
if [[ -n $failed || $ran -ne $jobs_count || $doc_rc -ne 0 ]]; then
  [[ -z $failed ]] || printf 'failed:\n%s\n' "$failed"
  ((doc_rc == 0)) || echo "doc tests failed"
  exit 1
fi
