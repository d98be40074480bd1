#!/usr/bin/env bash
# One GPU check that fits the time a GPU is lent (docs/compute.md#the-gpu-check).
#
#   scripts/gpu-check.sh --prepare                here, with registry access: fills .gpu-check/ (git-ignored)
#                                                 with cp312 manylinux wheels of what the GPU image lacks,
#                                                 Fashion-MNIST's four .gz files and the commit (source.json)
#   scripts/gpu-check.sh --out DIR                on the GPU machine (Python 3.12, no internet): installs from
#                                                 .gpu-check/, then runs every step below, each capped
#   scripts/gpu-check.sh --device cpu --out DIR   the same steps at tiny sizes on the CPU (CI runs it:
#                                                 tests/test_gpu_check.py), so the script cannot rot
#   scripts/gpu-check.sh --keep DIR               copies a check's files to results/gpu/<date>-<device>/
#
# Options: --from DIR (the prepared folder, default .gpu-check), --budget S (the whole check's seconds,
# default 390 on cuda: give the device tool's call timeout_s 420 and carry [".gpu-check"]; 1500 on cpu),
# --python PY (default .venv/bin/python where it exists, else python3).
#
# The steps, in order of value; each runs under `timeout -k 5 CAP` (SIGTERM at its cap, SIGKILL 5 s later, to its
# process group; then the same to any process it left elsewhere, found by a mark in its environment), its
# cap cut to what is left of the budget; one that would start with under MIN_STEP_S left is recorded as
# skipped. Then, whatever its status, its follow-up (at most FOLLOW_S) copies what it wrote to the work
# folder into DIR: a step cut at its cap keeps what it measured. A failed step does not stop the others;
# the exit status is 0 when every step was ok. Caps (cuda, seconds) and why, by the project's own estimates
# (compile times: benchbench.meters.compile_costs, 51 s per 62 parameter tensors cold on an H100, 4 % of
# that from inductor's warm cache); GPU_CHECK_CAP_<STEP> (e.g. GPU_CHECK_CAP_SBS_EAGER=5) overrides one:
#   setup              60  the wheels to a folder on PYTHONPATH (setuptools and wheel to one for the build
#                          alone); the project, editable, unless this Python has it; every plugin must load (~20 s)
#   env                30  `benchbench device --json` (CUDA start, the bf16 matmul peak on 8192^3, a 1 GiB copy) and the
#                          environment, to env.json (written by the follow-up, also when the peak was cut) (~10 s)
#   quickstart         80  run quickstart --quick --fresh with `compile = true` on its first model alone
#                          (bit-r20x1-small: 62 tensors, cold compile 51 s, measured) + ~15 s of start, 20
#                          steps and the test: a compiled training cell through `run` (CUDA graphs on CUDA),
#                          its compile and step times remembered
#   quickstart-eager   80  the same suite with --eager (~15 s); the same cap, so neither is cut where the other is not
#   sbs-eager          75  benchmarks/side_by_side.py, ViT-B/16 and BiT-R50x1 training eager, bf16, batch 256,
#                          3 rounds of 5 + 20 steps a side: 12 runs of 6,400 images at 2,000-2,500 img/s (H100)
#                          ~35 s, + the same-model checks on the CPU ~10 s a model; a line per run and per row
#   sbs-vit-b16-compiled  150  the same, compiled, benchbench's side first: its cold compile 125 s (152 tensors)
#                          and its steps fit; timm's compile after it fits only where compiling is faster than
#                          estimated (on the H100, both sides compiled within 90 s)
#   profile            40  profile vit-b16 --mode train, bf16, batch 256, compiled by the policy: the graph the
#                          step before compiled, so from the warm cache (~5 s), 3 + 10 steps, the matmul peak
#   projection         60  scripts/gpu_check.py projection: timm's resnet50, vit_base_patch16_224, convnext_base,
#                          efficientnet_b0 and resnetv2_50x1_bit as timm's RTX 4090 file measured them (inference, fp16 autocast,
#                          eager, batch 1024; 3 + 6 steps, ~1-3 s a model on an H100 at timm's rates), against
#                          their projection from that file onto this GPU (~15 s of start): the projection's error
#   pytest-gpu        120  pytest -m gpu, 45 s per test (pytest-timeout, where installed): what is left, about 45 s
#                          by the estimates above (the whole needs more: rerun it with --steps pytest-gpu)
#   isolation          90  what a process per cell costs on CUDA (a context each): the quickstart's first model,
#                          --quick --eager, seeds 0-9, run isolated then --no-isolate (~2 x 10 s of start, 10 short
#                          cells each way); a line `kind: isolation-cost` in profile.jsonl. Where time is left, or
#                          --steps isolation
#   sbs-bit-r50x1-compiled 150  as sbs-vit-b16-compiled for BiT-R50x1 (153 tensors): where time is left, or --steps
# cpu: the same commands at tiny sizes, eager throughout: the quickstart's `compile = false` (its cell's cold
# CPU compile, ~77 s estimated, ran past 300 s on 2 busy cores), side_by_side --compile off (two CPU compiles
# a model, ~170 s); ViT-Mu/4 for ViT-B/16; the projection of resnet50 and efficientnet_b0 at batch 2, fp32,
# onto the H100 (a dry run of the code: its errors mean nothing); the isolation cost at seeds 0 and 1.
# --steps NAME,... runs only those (setup and env always): a rerun of what failed or was cut.
# The files in DIR, flat (the GPU machine hands back at most 8), each written as its step goes:
#   commands.txt (each exact command, its cap, exit status and seconds), steps.jsonl (a line per step),
#   log.txt (every step's output), env.json, quickstart.jsonl (both runs' records, a line per cell that
#   ended), side_by_side.jsonl (the header, the model checks, a line per side's run and per row),
#   pytest.jsonl (a line per test), profile.jsonl (the profile; then a line per model the projection step
#   measured and its projection, `kind: projection`: `project validate`'s keys and a row per model; then
#   the isolation step's `kind: isolation-cost`).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MIN_STEP_S=10
FOLLOW_S=30  # a step's follow-up: a copy, or env.json (imports torch)

usage() { sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "gpu-check: $*" >&2; exit 2; }
cap() {  # cap KEY: the seconds a step may take; GPU_CHECK_CAP_<KEY> (upper case, - as _) overrides
  local var="GPU_CHECK_CAP_${1^^}"
  var=${var//-/_}
  if [ -n "${!var:-}" ]; then
    [[ "${!var}" =~ ^[0-9]+$ ]] || die "$var=${!var}: a whole number of seconds"
    echo "${!var}"
  elif [ "$DEVICE" = cuda ]; then echo "${CAP_CUDA[$1]}"; else echo "${CAP_CPU[$1]}"; fi
}

# --- --prepare: what the GPU machine lacks, as files in the working tree ------------------------------
# cp312 manylinux wheels: SQLAlchemy (the results database) and greenlet (SQLAlchemy before 2.1 needs it),
# fvcore's own needs yacs and termcolor (iopath's portalocker is on the image), torchao (precision fp8);
# fvcore and iopath exist only as sdists, so their (pure Python) wheels are built here. Versions are this
# machine's .venv's where it has them, so the GPU runs what the tests here ran. setuptools (>= 70.1) and wheel
# build the project itself offline (pip install --no-build-isolation -e) whatever the image's setuptools.
BINARY=(sqlalchemy greenlet yacs termcolor torchao)
SDIST=(fvcore iopath)
PLATFORMS=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
           --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
FMNIST=/usr/share/datasets/fashion-mnist

pinned() {  # NAME -> NAME==VERSION as installed for $PY, else NAME
  local v
  v=$("$PY" -c 'import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass' "$1" 2>/dev/null)
  if [ -n "$v" ]; then echo "$1==$v"; else echo "$1"; fi
}

prepare() {
  local wheels="$FROM/wheels" data="$FROM/data/fashion-mnist" tmp specs=() sdists=() name
  tmp=$(mktemp -d)
  rm -rf "$wheels" && mkdir -p "$wheels" "$data"
  for name in "${BINARY[@]}"; do specs+=("$(pinned "$name")"); done
  # what builds the project without build isolation where the image's setuptools predates 70.1
  specs+=("$(pinned wheel)")
  name=$(pinned setuptools)
  if "$PY" -c 'import sys; from packaging.version import Version as V; sys.exit(V(sys.argv[1]) < V("70.1"))' \
       "${name#setuptools==}" 2>/dev/null; then specs+=("$name"); else specs+=("setuptools>=70.1"); fi
  for name in "${SDIST[@]}"; do sdists+=("$(pinned "$name")"); done
  "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: "${PLATFORMS[@]}" \
    -d "$wheels" "${specs[@]}" 2> >(grep -v "^WARNING: Location" >&2) || die "pip download failed"
  "$PY" -m pip download -q --disable-pip-version-check --no-deps --no-binary=:all: -d "$tmp" "${sdists[@]}" \
    2> >(grep -v "^WARNING: Location" >&2) || die "pip download of the sdists failed"
  "$PY" -m pip wheel -q --disable-pip-version-check --no-deps -w "$wheels" "$tmp"/*.tar.gz \
    2> >(grep -v "^WARNING: Location" >&2) || die "pip wheel failed"
  rm -rf "$tmp"
  "$PY" - "$wheels" <<'EOF' || die "the prepared wheels lack setuptools>=70.1 or wheel (the project's offline build)"
import pathlib, sys
from packaging.utils import parse_wheel_filename
from packaging.version import Version
got = {str(n): v for n, v, *_ in map(parse_wheel_filename, (w.name for w in pathlib.Path(sys.argv[1]).glob("*.whl")))}
print("gpu-check: the build: setuptools", got.get("setuptools"), "wheel", got.get("wheel"), file=sys.stderr)
sys.exit(not ("setuptools" in got and got["setuptools"] >= Version("70.1") and "wheel" in got))
EOF
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    [ -f "$FMNIST/$f.gz" ] || die "$FMNIST/$f.gz is missing: install Debian's dataset-fashion-mnist (scripts/setup.sh)"
    cp -p "$FMNIST/$f.gz" "$data/"
  done
  "$PY" - "$FROM/source.json" <<'EOF'
import datetime, json, subprocess, sys
git = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True).stdout.strip()
json.dump({"commit": git("rev-parse", "HEAD") or None,
           "modified_files": len(git("status", "--porcelain", "--untracked-files=no").splitlines()),
           "prepared": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")},
          open(sys.argv[1], "w"))
EOF
  local tree_kib prepared_kib
  prepared_kib=$(du -sk "$FROM" | cut -f1)
  tree_kib=$(git ls-files -z --cached --others --exclude-standard | du -ck --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  ls -1 "$wheels"
  echo "gpu-check: prepared $FROM: $(ls "$wheels" | wc -l) wheels, Fashion-MNIST; $((prepared_kib / 1024)) MiB" \
       "+ the working tree's $((tree_kib / 1024)) MiB = $(((prepared_kib + tree_kib) / 1024)) MiB of the 64 MiB that travel"
  if [ $((prepared_kib + tree_kib)) -gt $((64 * 1024)) ]; then
    die "over the device tool's 64 MiB: leave something out"
  fi
  echo "gpu-check: on the GPU machine (device tool): command 'bash scripts/gpu-check.sh --out \$OUT'," \
       "carry [\"$(realpath --relative-to="$ROOT" "$FROM")\"], timeout_s 420 (the check's budget: 390 s)"
}

# --- the check ----------------------------------------------------------------------------------------
json_str() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\n'/\\n}; s=${s//$'\t'/\\t}; printf '"%s"' "$s"; }
now_us() { echo "${EPOCHREALTIME/./}"; }

marked() {  # marked MARK: the live processes whose environment carries GPU_CHECK_STEP=MARK
  grep -lsazx "GPU_CHECK_STEP=$1" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | tr '\n' ' '
}

reap() {  # reap MARK: stop what a step left behind (after 2 s to end by itself): SIGTERM, SIGKILL 5 s later;
  local pids n  # prints how many there were
  for _ in 1 2 3 4; do
    pids=$(marked "$1")
    [ -n "$pids" ] || break
    sleep 0.5
  done
  n=$(wc -w <<<"$pids")
  if [ "$n" -gt 0 ]; then
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      sleep 0.5
      pids=$(marked "$1")
      [ -n "$pids" ] || break
    done
    # shellcheck disable=SC2086
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null
  fi
  echo "$n"
}

copy_records() {  # copy_records RESULTS FILE: the follow-up of a `run --results RESULTS` step: every record
  # its run wrote (a line per cell that ended), appended to FILE, which exists afterwards even if none did
  printf 'touch %q; for r in %q/*/*/records.jsonl; do if [ -f "$r" ]; then cat "$r" >> %q; fi; done' "$2" "$1" "$2"
}

# setuptools >= 70.1 builds an editable wheel by itself; an older one needs the `wheel` package
BUILD_CHECK='import importlib.util as u, re, setuptools as s, sys
w = u.find_spec("wheel") is not None; ok = tuple(map(int, re.findall(r"\d+", s.__version__)[:2])) >= (70, 1) or w
print("setuptools", s.__version__, "wheel" if w else "no wheel", "" if ok else ": needs setuptools>=70.1 or wheel")
sys.exit(not ok)'

step() {  # step NAME CAP_S COMMAND [FOLLOW]: COMMAND (bash lines) under its cap, then FOLLOW (bash lines, at most
  # FOLLOW_S) whatever COMMAND's status: what copies COMMAND's results to OUT; its record in commands, steps, log
  local name=$1 cap=$2 cmd=$3 follow=${4:-} left start rc status wall mark left_over follow_rc=null
  case "$name" in setup|env) ;; *) [ -z "${ONLY:-}" ] || [[ "$ONLY" == *",$name,"* ]] || return 0 ;; esac
  left=$(( (DEADLINE_US - $(now_us)) / 1000000 ))
  if [ "$left" -lt "$MIN_STEP_S" ]; then
    printf '# %s: skipped, %s s of the budget left\n' "$name" "$left" >>"$OUT/commands.txt"
    printf '{"step": "%s", "status": "skipped", "cap_s": %s, "left_s": %s, "command": %s}\n' \
      "$name" "$cap" "$left" "$(json_str "$cmd")" >>"$OUT/steps.jsonl"
    echo "gpu-check: $name skipped ($left s left)" >&2
    FAILED=$((FAILED + 1))
    return 0
  fi
  [ "$cap" -gt "$left" ] && cap=$left
  printf '# %s (cap %s s)\n%s\n' "$name" "$cap" "$cmd" >>"$OUT/commands.txt"
  printf '\n===== %s (cap %s s): %s\n' "$name" "$cap" "$cmd" >>"$OUT/log.txt"
  echo "gpu-check: $name (cap $cap s) ..." >&2
  mark="$$-$name-$RANDOM"
  start=$(now_us)
  # timeout: SIGTERM to the step's process group at its cap, SIGKILL 5 s later; reap: whatever the step
  # left outside that group (its own sessions, orphans), found by the mark in its environment
  GPU_CHECK_STEP=$mark timeout -k 5 "$cap" bash -c "$cmd" >>"$OUT/log.txt" 2>&1 </dev/null
  rc=$?
  left_over=$(reap "$mark")
  wall=$(( ($(now_us) - start) / 1000 ))  # ms
  case $rc in 0) status=ok ;; 124|137) status=timed_out ;; *) status=failed ;; esac
  wall=$(printf '%d.%03d' $((wall / 1000)) $((wall % 1000)))
  printf '# -> %s, exit status %s, %s s%s\n' "$status" "$rc" "$wall" \
    "$([ "$left_over" -gt 0 ] && echo ", $left_over processes left over, stopped")" >>"$OUT/commands.txt"
  if [ -n "$follow" ]; then  # the step's results to OUT, also (above all) when the step was cut or failed
    printf '# %s, then, whatever its status (cap %s s):\n%s\n' "$name" "$FOLLOW_S" "$follow" >>"$OUT/commands.txt"
    printf '\n----- %s, then (cap %s s): %s\n' "$name" "$FOLLOW_S" "$follow" >>"$OUT/log.txt"
    timeout -k 2 "$FOLLOW_S" bash -c "$follow" >>"$OUT/log.txt" 2>&1 </dev/null
    follow_rc=$?
    printf '# -> exit status %s\n' "$follow_rc" >>"$OUT/commands.txt"
    [ "$follow_rc" -eq 0 ] || [ "$status" != ok ] || status=failed
  fi
  printf '{"step": "%s", "status": "%s", "rc": %s, "wall_s": %s, "cap_s": %s, "left_over": %s, "command": %s%s}\n' \
    "$name" "$status" "$rc" "$wall" "$cap" "$left_over" "$(json_str "$cmd")" \
    "$([ -n "$follow" ] && printf ', "follow": %s, "follow_rc": %s' "$(json_str "$follow")" "$follow_rc")" \
    >>"$OUT/steps.jsonl"
  echo "gpu-check: $name $status ($wall s)" >&2
  [ "$status" = ok ] || FAILED=$((FAILED + 1))
}

check() {
  mkdir -p "$OUT" || die "cannot create $OUT"
  OUT=$(cd "$OUT" && pwd)
  if [ -n "$(ls -A "$OUT")" ]; then die "$OUT is not empty: give an empty or new folder"; fi
  DEADLINE_US=$(( $(now_us) + BUDGET_S * 1000000 ))
  FAILED=0
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
  export PYTHONUNBUFFERED=1 PYTHONPATH="$WORK/site:$ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}"
  if [ -d "$FROM/data/fashion-mnist" ]; then export BENCHBENCH_DATA="$FROM/data"; fi
  printf '# scripts/gpu-check.sh --device %s, budget %s s; each step runs as `bash -c COMMAND` in:\ncd %q\n' \
    "$DEVICE" "$BUDGET_S" "$ROOT" >"$OUT/commands.txt"
  printf 'export PYTHONUNBUFFERED=1 PYTHONPATH=%q%s\n' "$PYTHONPATH" \
    "${BENCHBENCH_DATA:+ BENCHBENCH_DATA=$(printf '%q' "$BENCHBENCH_DATA")}" >>"$OUT/commands.txt"

  local py o w f bb
  py=$(printf '%q' "$PY") o=$(printf '%q' "$OUT") w=$(printf '%q' "$WORK") f=$(printf '%q' "$FROM")
  # setup: the prepared wheels to a folder on PYTHONPATH, setuptools and wheel to one that only the project's
  # build sees (the image's setuptools may predate 70.1, which builds an editable wheel without `wheel`);
  # the project editable unless this Python has this tree's already (.venv here); then everything
  # benchbench imports, and every plugin, must load. Only the wheels this Python takes (the GPU machine's
  # 3.12 takes all; a CPU run here, 3.11, the pure ones).
  local setup="set -e" build="PYTHONPATH=$w/build:\$PYTHONPATH"
  if compgen -G "$FROM/wheels/*.whl" >/dev/null; then
    setup+=$'\n'"wheels=\$($py scripts/gpu_check.py wheels $f/wheels); tools=; rest="
    setup+=$'\n'"for x in \$wheels; do case \${x##*/} in setuptools-*|wheel-*) tools+=\" \$x\" ;; *) rest+=\" \$x\" ;; esac; done"
    setup+=$'\n'"[ -z \"\$rest\" ] || $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $w/site \$rest"
    setup+=$'\n'"[ -z \"\$tools\" ] || $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $w/build \$tools"
  fi
  setup+=$'\n'"if ! $py -c 'import benchbench_plugins, sys; sys.exit(not benchbench_plugins.__file__.startswith(sys.argv[1]))'"
  setup+=" $(printf '%q' "$ROOT/plugins/"); then"
  setup+=$'\n'"  $build $py -c '$BUILD_CHECK'"
  setup+=$'\n'"  $build $py -m pip install -q --no-deps --no-build-isolation --no-index -e $(printf '%q' "$ROOT")"
  setup+=$'\n'"fi"
  setup+=$'\n'"$py -c 'import benchbench.cli, fvcore, sqlalchemy, torch; from benchbench.plugins import load_catalog"
  setup+='; print(len(load_catalog(strict=True).models), "models, torch", torch.__version__)'"'"
  step setup "$(cap setup)" "$setup"

  bb="$(dirname "$PY")/benchbench"  # the console script, once the project is installed
  if [ -x "$bb" ]; then
    bb=$(printf '%q' "$bb")
  else
    bb="$py -c 'import sys; from benchbench.cli import main; sys.exit(main())'"
  fi
  local timeout_opt=""
  if "$PY" -c 'import pytest_timeout' 2>/dev/null; then timeout_opt=" --timeout 45"; fi
  # cuda: the sizes the GPU targets are stated at (issue 33); cpu: the same commands, tiny
  local dev="--device $DEVICE" quick=" --quick" peak="" vit=vit-b16 sbs_size="--precision bf16 --batch-size 256"
  local sbs_run="--rounds 3 --warmup 5 --steps 20" compiled="--compile on" qs_compile=true
  local prof="vit-b16 --mode train --precision bf16 --batch-size 256 --warmup-steps 3 --min-steps 10 --min-seconds 1"
  local projected="" iso_seeds="0 1 2 3 4 5 6 7 8 9"
  if [ "$DEVICE" = cpu ]; then
    peak=" --matmul-n 256" vit=vit-mu4 sbs_size="--precision fp32 --batch-size 2 --threads 1"
    sbs_run="--rounds 1 --warmup 1 --steps 1" compiled="--compile off" qs_compile=false
    prof="vit-mu4 --mode train --no-compile --no-channels-last --batch-size 8 --warmup-steps 1 --min-steps 2"
    prof+=" --min-seconds 0"
    projected=" --models resnet50,efficientnet_b0 --batch-size 2 --steps 1" iso_seeds="0 1"
  fi
  # env: the environment is written by the follow-up, with the device's reading where it came
  step env "$(cap env)" "$bb device $dev$peak --json > $w/device.json" \
    "$py scripts/gpu_check.py env $o $w/device.json || $py scripts/gpu_check.py env $o"
  # the quickstart's first model alone, compiled as asked (compile = true; cpu: false), against the same cell --eager
  local suite="$w/quickstart-cell.toml" run
  run="sed -e 's/^models = .*/models = [\"bit-r20x1-small\"]/' -e 's/^\\[settings\\.scratch\\]\$/&\\ncompile = $qs_compile/'"
  run+=" suites/quickstart.toml > $suite"$'\n'"$bb run $suite$quick $dev --fresh --no-progress"
  step quickstart "$(cap quickstart)" "$run --results $w/q" "$(copy_records "$WORK/q" "$OUT/quickstart.jsonl")"
  step quickstart-eager "$(cap quickstart-eager)" "$run --eager --results $w/qe" \
    "$(copy_records "$WORK/qe" "$OUT/quickstart.jsonl")"
  local sbs="$py benchmarks/side_by_side.py $dev --mode train $sbs_size $sbs_run --jsonl $o/side_by_side.jsonl --jsonl-runs"
  # these write their lines straight to OUT as each is measured; the follow-up makes the file exist
  step sbs-eager "$(cap sbs-eager)" "$sbs --compile off --models $vit bit-r50x1" "touch $o/side_by_side.jsonl"
  step "sbs-$vit-compiled" "$(cap sbs-vit-compiled)" "$sbs $compiled --first benchbench --models $vit" \
    "touch $o/side_by_side.jsonl"
  step profile "$(cap profile)" "$bb profile $prof $dev --jsonl $o/profile.jsonl" "touch $o/profile.jsonl"
  step projection "$(cap projection)" "$py scripts/gpu_check.py projection $o/profile.jsonl $dev$projected" \
    "touch $o/profile.jsonl"
  local gpu_tests  # the modules with gpu tests (collecting every module costs half a minute)
  gpu_tests=$(grep -l "pytest.mark.gpu" tests/test_*.py | tr '\n' ' ')
  step pytest-gpu "$(cap pytest-gpu)" \
    "GPU_CHECK_PYTEST_JSONL=$o/pytest.jsonl $py -m pytest -m gpu -v -p gpu_check -p no:cacheprovider$timeout_opt $gpu_tests" \
    "touch $o/pytest.jsonl"
  # the same cells isolated (run's default) and in the driver's process; the helper writes the difference
  local iso="$bb run $w/isolation.toml --quick --eager $dev --fresh --no-progress" iso_cmd seed
  for seed in $iso_seeds; do iso+=" --seed $seed"; done
  iso_cmd="sed -e 's/^models = .*/models = [\"bit-r20x1-small\"]/' suites/quickstart.toml > $w/isolation.toml"
  iso_cmd+=$'\n'"t0=\$(date +%s%N)"$'\n'"$iso --results $w/iso-a"
  iso_cmd+=$'\n'"t1=\$(date +%s%N)"$'\n'"$iso --no-isolate --results $w/iso-b"
  iso_cmd+=$'\n'"t2=\$(date +%s%N)"$'\n'"$py scripts/gpu_check.py isolation $o/profile.jsonl $w/iso-a $w/iso-b"
  iso_cmd+=" \$(( (t1 - t0) / 1000000 )) \$(( (t2 - t1) / 1000000 ))"
  step isolation "$(cap isolation)" "$iso_cmd" "touch $o/profile.jsonl"
  step sbs-bit-r50x1-compiled "$(cap sbs-bit-compiled)" "$sbs $compiled --first benchbench --models bit-r50x1" \
    "touch $o/side_by_side.jsonl"
  echo "gpu-check: $(grep -c '"status": "ok"' "$OUT/steps.jsonl") of $(wc -l <"$OUT/steps.jsonl") steps ok;" \
       "files in $OUT: $(ls "$OUT" | tr '\n' ' ')" >&2
  [ "$FAILED" -eq 0 ]
}

folder_arg() {  # folder_arg OPTION VALUE: VALUE as a path from the caller's folder; a missing or dash value dies
  case "$2" in
    ""|-*) die "$1 needs a folder, not '$2'" ;;
    /*) printf '%s' "$2" ;;
    *) printf '%s/%s' "$CALLER" "$2" ;;
  esac
}

main() {
  CALLER=$PWD  # folders given relative are the caller's, whatever this script's own folder
  cd "$ROOT"
  ACTION="" OUT="" DEVICE=cuda FROM="$ROOT/.gpu-check" BUDGET_S="" PY="" KEEP="" ONLY=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --prepare) ACTION=prepare ;;
      --out) ACTION=check; OUT=$(folder_arg --out "${2:-}") || exit 2; shift ;;
      --keep) ACTION=keep; KEEP=$(folder_arg --keep "${2:-}") || exit 2; shift ;;
      --device) DEVICE=${2:?--device needs cuda or cpu}; shift ;;
      --from) FROM=$(folder_arg --from "${2:-}") || exit 2; shift ;;
      --budget) BUDGET_S=${2:?--budget needs seconds}; shift ;;
      --python) PY=${2:?--python needs an interpreter}; shift ;;
      --steps) ONLY=",${2:?--steps needs step names},"; shift ;;
      -h|--help) usage ;;
      *) die "unknown argument '$1' (allowed: --prepare, --out DIR, --keep DIR, --device cuda|cpu, --from DIR," \
             "--budget S, --steps NAME,..., --python PY)" ;;
    esac
    shift
  done
  [ -n "$ACTION" ] || usage
  case "$DEVICE" in cuda|cpu) ;; *) die "--device $DEVICE: allowed: cuda, cpu" ;; esac
  # Seconds each step may take at most (the header says why), and the whole check's budget. cuda: the whole
  # ends within 6.5 minutes (a GPU is lent for 15 minutes, its start and a rerun included). cpu: tiny sizes,
  # but 2 busy cores and a cold CPU compile; there a cap only bounds CI's time, so it leaves room for a loaded
  # machine (CI's slow step once took 153 s over the isolation step's four quick cells).
  local name
  declare -gA CAP_CUDA=([setup]=60 [env]=30 [quickstart]=80 [quickstart-eager]=80 [sbs-eager]=75
                       [sbs-vit-compiled]=150 [profile]=40 [projection]=60 [pytest-gpu]=120 [isolation]=90
                       [sbs-bit-compiled]=150)
  declare -gA CAP_CPU=([setup]=120 [env]=60 [quickstart]=300 [quickstart-eager]=300 [sbs-eager]=240
                      [sbs-vit-compiled]=120 [profile]=90 [projection]=120 [pytest-gpu]=120 [isolation]=300
                      [sbs-bit-compiled]=150)
  if [ "$DEVICE" = cuda ]; then BUDGET_DEFAULT=390; else BUDGET_DEFAULT=1500; fi
  BUDGET_S=${BUDGET_S:-$BUDGET_DEFAULT}
  for name in "${!CAP_CUDA[@]}"; do cap "$name" >/dev/null || exit 2; done  # a bad GPU_CHECK_CAP_*: one line
  local steps="quickstart quickstart-eager sbs-eager sbs-vit-b16-compiled profile projection pytest-gpu"
  steps+=" isolation sbs-bit-r50x1-compiled"
  [ "$DEVICE" = cpu ] && steps=${steps/sbs-vit-b16/sbs-vit-mu4}
  for name in ${ONLY//,/ }; do
    [[ " $steps " == *" $name "* ]] || die "--steps: no step '$name' on $DEVICE (steps: ${steps// /, })"
  done
  [[ "$BUDGET_S" =~ ^[0-9]+$ ]] || die "--budget $BUDGET_S: a whole number of seconds"
  if [ -z "$PY" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY=$(command -v python3 || true); fi
  fi
  [ -n "$PY" ] && command -v "$PY" >/dev/null || die "no Python found: give one with --python PY"
  PY=$(command -v "$PY")
  case "$FROM" in /*) ;; *) FROM="$ROOT/$FROM" ;; esac
  case "$ACTION" in
    prepare) prepare ;;
    check) check ;;
    keep) "$PY" "$ROOT/scripts/gpu_check.py" keep "$KEEP" ;;
  esac
}

# Sourced (tests/test_gpu_check.py calls `step` alone), the functions only; run, the action.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; exit $?; fi
