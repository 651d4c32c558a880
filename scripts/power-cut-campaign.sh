#!/usr/bin/env bash
# A long power-cut campaign, outside CI: runs tests/recovery/test_power_cut.py's
# STOMP-load test in rounds (CUTS_PER_ROUND cuts per log type, a new seed each
# round) until TOTAL cuts are done or a round fails. One JSON line per round goes
# to the results file, so a campaign stopped early still says what it did.
#
#   bash scripts/power-cut-campaign.sh [TOTAL] [CUTS_PER_ROUND] [RESULTS]
#   (defaults: 5000 cuts, 250 per log type per round, power-cut-campaign.jsonl)
set -uo pipefail
cd "$(dirname "$0")/.."
total=${1:-5000}
per_round=${2:-250}
results=${3:-power-cut-campaign.jsonl}
bash scripts/setup-venv.sh >/dev/null || exit 1

done_cuts=0
round=0
while [ "$done_cuts" -lt "$total" ]; do
  round=$((round + 1))
  seed=$(( (RANDOM << 15) | RANDOM ))
  out=$(mktemp)
  start=$(date +%s)
  HARBORMQ_CRASH_SEED=$seed .venv/bin/python -m pytest -q -s -p no:cacheprovider \
    tests/recovery/test_power_cut.py -k test_power_cuts_under_stomp_load \
    --power-cuts "$per_round" >"$out" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  # the test prints one "power cuts (<type> log): {stats}; seed N" line per log type
  .venv/bin/python - "$out" "$round" "$seed" "$rc" "$secs" >>"$results" <<'EOF'
import ast, json, re, sys
out, round_, seed, rc, secs = sys.argv[1:]
stats = {m.group(1): ast.literal_eval(m.group(2)) for m in re.finditer(
    r"power cuts \((\w+) log\): (\{.*?\}); seed", open(out, errors="replace").read())}
print(json.dumps({"round": int(round_), "seed": int(seed), "exit": int(rc),
                  "seconds": int(secs), "stats": stats}))
EOF
  if [ "$rc" -ne 0 ]; then
    echo "round $round (seed $seed) failed; pytest output kept in $out" >&2
    tail -50 "$out" >&2
    exit "$rc"
  fi
  rm -f "$out"
  done_cuts=$((done_cuts + 2 * per_round))
  echo "round $round: $done_cuts of $total cuts done, ${secs}s" >&2
done
echo "campaign done: $done_cuts cuts, results in $results" >&2
