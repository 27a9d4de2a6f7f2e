#!/usr/bin/env bash
# The main job (`make run`): the whole roompub story on the bundled samples,
# with nothing to install.
#
#  1. publisher verify checks the sample files offline;
#  2. publisher serve starts on the embedded nats-server in a temporary
#     directory (fsync before every ack; it trusts the reference host);
#  3. publisher journal ships the sample capsules into sample rooms, then
#     again (nothing new), then the tampered capsule (its prefix lands, the
#     tampered line and everything after it never do);
#  4. publisher execution ships the reference records, one of which is
#     refused (foreign_evidence);
#  5. the server is stopped, leaving no process behind.
#
# Every step's verdict is checked; the script exits 0 only if all are as
# expected.
#
#   testdata/samples/run.sh [PUBLISHER]     (default bin/publisher)
set -euo pipefail

publisher=${1:-bin/publisher}
s=testdata/samples
tmp=$(mktemp -d)
server_pid=
fail=0

stop_server() {
	if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid"
		wait "$server_pid" || true
	fi
	server_pid=
}
trap 'stop_server; rm -rf "$tmp"' EXIT

# expect STATUS WANT WHAT: record a verdict.
expect() {
	if [[ $1 -eq $2 ]]; then
		printf '  as expected  exit %s: %s\n' "$1" "$3"
	else
		printf '  UNEXPECTED   exit %s (expected %s): %s\n' "$1" "$2" "$3"
		fail=1
	fi
}

# step TITLE WANT-STATUS COMMAND...: run a publisher command and check its status.
step() {
	local title=$1 want=$2 status=0
	shift 2
	echo
	echo "== $title"
	echo "\$ publisher $*"
	"$publisher" "$@" || status=$?
	expect "$status" "$want" "$title"
}

# grep_out PATTERN WHAT COMMAND...: run a command and check its output.
grep_out() {
	local pattern=$1 what=$2 out
	shift 2
	out=$("$publisher" "$@" 2>&1) || true
	if grep -qE -- "$pattern" <<<"$out"; then
		printf '  as expected  %s\n' "$what"
	else
		printf '  UNEXPECTED   %s: output was:\n%s\n' "$what" "$out"
		fail=1
	fi
}

step "1. verify the sample files offline (2 of 6 must be refused)" 1 \
	verify "$s/capsules/slugify-run" "$s/capsules/csv-dedupe" "$s/records/verified.json" "$s/records/refused.json" \
	"$s/capsules/broken" "$s/records/foreign-evidence.json"

echo
echo "== 2. start publisher serve: embedded nats-server, JetStream in $tmp/data"
"$publisher" --config "$s/roompub.yaml" serve --listen 127.0.0.1:-1 --store-dir "$tmp/data" 2>"$tmp/serve.log" &
server_pid=$!
for _ in $(seq 300); do
	grep -q 'serving on' "$tmp/serve.log" 2>/dev/null && break
	kill -0 "$server_pid" 2>/dev/null || break
	sleep 0.1
done
url=$(sed -n 's/^publisher: serving on \(nats:[^ ]*\).*/\1/p' "$tmp/serve.log")
if [[ -z $url ]]; then
	echo "publisher serve did not start:"
	cat "$tmp/serve.log"
	exit 1
fi
grep 'serving on' "$tmp/serve.log"
export NATS_URL=$url

step "3a. ship a 299-entry capsule into room:eval-slugify" 0 \
	journal --room room:eval-slugify "$s/capsules/slugify-run"
step "3b. ship a 14-entry capsule into room:eval-csv" 0 \
	journal --room room:eval-csv "$s/capsules/csv-dedupe"
step "3c. ship them again: nothing new is stored" 0 \
	journal --room room:eval-slugify "$s/capsules/slugify-run"
grep_out '0 stored, 0 duplicate, 299 already stored \(nothing new\)' "the second shipment stored nothing" \
	journal --room room:eval-slugify "$s/capsules/slugify-run"
step "3d. ship the tampered capsule: lines 1-13 land, line 14 is refused" 1 \
	journal --room room:eval-slugify-rerun "$s/capsules/broken"
grep_out 'invalid_entry at .*broken/journal.ndjson:14 /entry_hash' "line 14 refused with invalid_entry" \
	journal --room room:eval-slugify-rerun "$s/capsules/broken"
step "3e. the same capsule into another room is refused" 1 \
	journal --room room:elsewhere "$s/capsules/csv-dedupe"

step "4a. ship the reference execution records into their room" 0 \
	execution "$s/records/verified.json" "$s/records/refused.json"
step "4b. one refused record: its evidence was observed on another instance" 1 \
	execution "$s/records/foreign-evidence.json"

echo
echo "== 5. stop publisher serve"
stop_server
if pgrep -f -- "--store-dir $tmp/data" >/dev/null; then
	echo "  UNEXPECTED   a publisher process is still running"
	fail=1
else
	echo "  as expected  server stopped, no process left behind"
fi
if grep -qiE '"level":"(error|fatal)"|\bERROR\b|panic' "$tmp/serve.log"; then
	echo "  UNEXPECTED   the server logged errors:"
	cat "$tmp/serve.log"
	fail=1
fi

echo
if [[ $fail -ne 0 ]]; then
	echo "make run: FAILED: the verdicts above are not the expected ones"
	exit 1
fi
echo "make run: OK: capsules and records landed in their rooms, duplicates stored nothing, refusals named their code and line, the server stopped cleanly"
