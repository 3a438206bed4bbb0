# Progress lines for the scripts: sourced, not run.
#
#   source scripts/progress.sh
#   step "making the venv" scripts/make_venv.sh ...
#
# `step NAME COMMAND...` prints `==> NAME`, runs COMMAND (its output goes
# through), prints `... NAME: N s` every 10 s while it runs, and ends with
# `==> NAME: done (N.N s)` or `==> NAME: FAILED, exit code C (N.N s)`; it
# returns COMMAND's exit code. `elapsed_since START` prints the seconds since
# START (`now`'s output) with one decimal. COMMAND must be a program, not a
# shell function (functions run without `set -e` there).

# Prints the time now in nanoseconds.
now() { date +%s%N; }

# Prints the seconds since $1 (from `now`) with one decimal.
elapsed_since() {
  local ns=$(( $(now) - $1 ))
  printf '%d.%d' $(( ns / 1000000000 )) $(( ns / 100000000 % 10 ))
}

step() {
  local name="$1" start ticker rc=0
  shift
  start="$(now)"
  echo "==> $name"
  # The ticker ends its own sleep when it is killed, and the sleep holds no
  # copy of stdout anyway: a pipe reading this script closes on time.
  (
    nap=""
    trap '[[ -n "$nap" ]] && kill "$nap" 2> /dev/null; exit 0' TERM
    while true; do
      sleep 10 > /dev/null 2>&1 &
      nap=$!
      wait "$nap"
      echo "... $name: $(elapsed_since "$start") s"
    done
  ) &
  ticker=$!
  "$@" || rc=$?
  kill "$ticker" 2> /dev/null || true
  wait "$ticker" 2> /dev/null || true
  if (( rc == 0 )); then
    echo "==> $name: done ($(elapsed_since "$start") s)"
  else
    echo "==> $name: FAILED, exit code $rc ($(elapsed_since "$start") s)"
  fi
  return "$rc"
}
