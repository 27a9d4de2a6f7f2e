#!/usr/bin/env bash
# The main job (`make run`): the whole roompub story on the bundled samples,
# with nothing to install.
#
#  1. publisher verify checks the sample files offline;
#  2. publisher keygen makes a publisher key, and publisher serve starts on
#     the embedded nats-server in a temporary directory (fsync before every
#     ack; it trusts the reference host, attests every message it admits
#     and signs room checkpoints with that key);
#  3. publisher journal ships the sample capsules into sample rooms, then
#     again (nothing new), then the tampered capsule (its prefix lands, the
#     tampered line and everything after it never do);
#  4. publisher execution ships the reference records, one of which is
#     refused (foreign_evidence);
#  5. the server is stopped (it writes each room's final checkpoint),
#     leaving no process behind;
#  6. an auditor replays the rooms from a restarted server, trusting only
#     that publisher key, checks every attestation and checkpoint, and
#     obtains an inclusion proof of one entry, which is checked offline
#     (and refused once tampered with);
#  7. witnessed rooms: three real litewitness processes (torchwood's, built
#     from go.mod's tool directives; no agent or server to install) cosign
#     the deployment log of a serve restarted with --origin and
#     --witness-policy; the audit requires a quorum of two; one entry's
#     evidence is exported and checked offline; a forged room checkpoint
#     that the witnesses cosign is refused as a split view.
#
# Every step's verdict is checked; the script exits 0 only if all are as
# expected.
#
#   testdata/samples/run.sh [PUBLISHER [SUBSCRIBER]]
#   (default bin/publisher and the subscriber next to it)
set -euo pipefail

publisher=${1:-bin/publisher}
subscriber=${2:-$(dirname "$publisher")/subscriber}
s=testdata/samples
tmp=$(mktemp -d)
server_pid=
witness_pid=
fail=0
GO=${GO:-go}

stop_server() {
	if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid"
		wait "$server_pid" || true
	fi
	server_pid=
}
stop_witnesses() {
	if [[ -n $witness_pid ]] && kill -0 "$witness_pid" 2>/dev/null; then
		kill -TERM "$witness_pid"
		wait "$witness_pid" || true
	fi
	witness_pid=
}
trap 'stop_server; stop_witnesses; rm -rf "$tmp"' EXIT

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

# sstep TITLE WANT-STATUS COMMAND...: the same for a subscriber command.
sstep() {
	local title=$1 want=$2 status=0
	shift 2
	echo
	echo "== $title"
	echo "\$ subscriber $*"
	"$subscriber" "$@" || status=$?
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
echo "== 2. make a publisher key, start publisher serve: embedded nats-server, JetStream in $tmp/data"
echo "\$ publisher keygen --out $tmp/publisher-key.pem"
publisher_id=$("$publisher" keygen --out "$tmp/publisher-key.pem")
echo "$publisher_id"
if [[ $publisher_id != node:did:key:z6Mk* ]]; then
	echo "  UNEXPECTED   publisher keygen printed no node id"
	exit 1
fi

# start_server [FLAG]...: publisher serve on $tmp/data, attesting with the
# key, with the flags given; sets url.
start_server() {
	: >"$tmp/serve.log"
	"$publisher" --config "$s/roompub.yaml" serve --listen 127.0.0.1:-1 --store-dir "$tmp/data" \
		--publisher-key "$tmp/publisher-key.pem" "$@" 2>>"$tmp/serve.log" &
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
}
start_server

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
grep_out 'room_conflict at .*csv-dedupe/journal.ndjson:1: .* \(expected "room:eval-csv", got "room:elsewhere"\)' "the refusal names the room the chain lives in" \
	journal --room room:elsewhere "$s/capsules/csv-dedupe"

step "4a. ship the reference execution records into their room" 0 \
	execution "$s/records/verified.json" "$s/records/refused.json"
step "4b. one refused record: its evidence was observed on another instance" 1 \
	execution "$s/records/foreign-evidence.json"

# check_stopped: no publisher process left, no error in serve's log.
check_stopped() {
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
}

echo
echo "== 5. stop publisher serve (it writes each room's final checkpoint)"
stop_server
check_stopped

echo
echo "== 6. audit the rooms, trusting only the publisher key (server restarted, nothing shipped)"
start_server
trusted_host=$(sed -n 's/^  - \(node:did:key:.*\)/\1/p' "$s/roompub.yaml")
sstep "6a. every message attested, every checkpoint verified, chains and records clean" 0 \
	audit --trusted-publisher "$publisher_id" --trusted-host "$trusted_host" --state-dir "$tmp/state"
out=$("$subscriber" audit --trusted-publisher "$publisher_id" --trusted-host "$trusted_host" --state-dir "$tmp/state" 2>&1) || true
if grep -qE 'checkpoints: [1-9][0-9]* verified, 0 refused' <<<"$out"; then
	echo "  as expected  the audit verified the rooms' checkpoints"
else
	printf '  UNEXPECTED   no verified checkpoint in the audit:\n%s\n' "$out"
	fail=1
fi
entry=$(sed -n 5p "$s/capsules/csv-dedupe/journal.ndjson" | grep -o '"entry_hash":"[0-9a-f]*"' | cut -d'"' -f4)
echo
echo "== 6b. an inclusion proof of entry 4 of room:eval-csv against its latest checkpoint"
echo "\$ subscriber prove --room room:eval-csv --entry $entry --trusted-publisher $publisher_id"
status=0
"$subscriber" prove --room room:eval-csv --entry "$entry" --trusted-publisher "$publisher_id" >"$tmp/proof.json" || status=$?
cat "$tmp/proof.json"
expect "$status" 0 "6b. an inclusion proof of entry 4 of room:eval-csv"
stop_server
check_stopped
sstep "6c. check the proof offline: only the proof and the publisher's node id" 0 \
	verify-proof --trusted-publisher "$publisher_id" "$tmp/proof.json"
sed 's/"leaf_index":4,/"leaf_index":5,/' "$tmp/proof.json" >"$tmp/tampered.json"
if cmp -s "$tmp/proof.json" "$tmp/tampered.json"; then
	echo "  UNEXPECTED   the proof does not name leaf 4"
	fail=1
fi
sstep "6d. the same proof claiming another leaf is refused" 1 \
	verify-proof --trusted-publisher "$publisher_id" "$tmp/tampered.json"

echo
echo "== 7. witnessed rooms: three litewitness processes cosign the deployment log"
origin=evidence.example.org/roompub
# Built, not run with go run: a signal must reach the tool itself, which
# stops the witnesses and removes their directories.
"$GO" build -o "$tmp/witnesses" ./test/tools/witnesses
"$GO" build -o "$tmp/splitview" ./test/breakers/splitview
echo "\$ go run ./test/tools/witnesses --n 3 --quorum 2 --origin $origin --publisher-id $publisher_id --policy $tmp/witnesses.policy"
"$tmp/witnesses" --n 3 --quorum 2 --origin "$origin" --publisher-id "$publisher_id" \
	--policy "$tmp/witnesses.policy" >"$tmp/witnesses.log" 2>&1 &
witness_pid=$!
for _ in $(seq 1800); do
	grep -q 'witnesses: ready' "$tmp/witnesses.log" 2>/dev/null && break
	kill -0 "$witness_pid" 2>/dev/null || break
	sleep 0.1
done
if ! grep -q 'witnesses: ready' "$tmp/witnesses.log"; then
	echo "the witnesses did not start:"
	cat "$tmp/witnesses.log"
	exit 1
fi
cat "$tmp/witnesses.policy"
echo "\$ publisher serve ... --origin $origin --witness-policy $tmp/witnesses.policy"
start_server --origin "$origin" --witness-policy "$tmp/witnesses.policy"

# audit_until STATUS PATTERN: run the witnessed audit until it exits with
# STATUS and its output matches PATTERN (the deployment log is cosigned
# about a second after it grows), at most 20 s; prints its output.
audit_until() {
	local want=$1 pattern=$2 status out
	for _ in $(seq 100); do
		status=0
		out=$("$subscriber" audit --trusted-publisher "$publisher_id" --trusted-host "$trusted_host" --state-dir "$tmp/state7" \
			--witness-policy "$tmp/witnesses.policy" 2>&1) || status=$?
		[[ $status -eq $want ]] && grep -qE -- "$pattern" <<<"$out" && break
		sleep 0.2
	done
	echo "$out"
	return "$status"
}
echo
echo "== 7a. the audit requires 2 of the 3 witnesses' cosignatures on the deployment log"
echo "\$ subscriber audit --trusted-publisher $publisher_id --witness-policy $tmp/witnesses.policy"
status=0
out=$(audit_until 0 'witnessed: size 4,') || status=$?
grep -E '^(CLEAN|REFUSED|deployment log|  witnessed)' <<<"$out" || true
expect "$status" 0 "7a. every room witnessed by a quorum of 2"
if grep -qE 'witnessed: size [0-9]+, .*cosigned by witness-1.roompub.test, witness-2.roompub.test, witness-3.roompub.test' <<<"$out"; then
	echo "  as expected  all three witnesses cosigned"
else
	printf '  UNEXPECTED   not cosigned by all three witnesses:\n%s\n' "$out"
	fail=1
fi

echo
echo "== 7b. portable evidence: entry 4 of room:eval-csv with its two tlog-proofs and the cosignatures"
sstep "7b. export the witnessed evidence of the entry" 0 \
	export --room room:eval-csv --entry "$entry" --out "$tmp/evidence" --trusted-publisher "$publisher_id" \
	--witness-policy "$tmp/witnesses.policy"
evidence=$(ls "$tmp"/evidence/*.roompub-evidence.json | head -1)
sstep "7b. check it offline: the file, the publisher's node id and the witness policy" 0 \
	verify-proof --trusted-publisher "$publisher_id" --witness-policy "$tmp/witnesses.policy" "$evidence"
# One byte of the stored entry changed: "eyJ" ({") becomes "fyJ".
sed 's/\("data": *"\)e/\1f/' "$evidence" >"$tmp/evidence-tampered.json"
if cmp -s "$evidence" "$tmp/evidence-tampered.json"; then
	echo "  UNEXPECTED   the evidence's data does not start as expected"
	fail=1
fi
sstep "7b. the same evidence with one byte of the entry changed is refused" 1 \
	verify-proof --trusted-publisher "$publisher_id" --witness-policy "$tmp/witnesses.policy" "$tmp/evidence-tampered.json"

echo
echo "== 7c. a split view: the publisher key signs another history of room:eval-csv into the deployment log"
echo "\$ go run ./test/breakers/splitview \$NATS_URL publisher-key.pem $origin room:eval-csv"
"$tmp/splitview" "$url" "$tmp/publisher-key.pem" "$origin" room:eval-csv
echo "\$ subscriber audit --trusted-publisher $publisher_id --witness-policy $tmp/witnesses.policy"
status=0
out=$(audit_until 1 'witnessed: size 5,') || status=$?
grep -E '^(CLEAN|REFUSED|deployment log|  witnessed)|split view' <<<"$out" || true
expect "$status" 1 "7c. the witnesses cosigned the consistent log; the audit refuses the room"
if grep -q 'room refused: split view' <<<"$out" && grep -qE '^REFUSED' <<<"$out" && grep -q 'witnessed: size 5,' <<<"$out"; then
	echo "  as expected  room:eval-csv refused as a split view, the other rooms still witnessed"
else
	printf '  UNEXPECTED   no split view refused:\n%s\n' "$out"
	fail=1
fi
stop_server
check_stopped
stop_witnesses

echo
if [[ $fail -ne 0 ]]; then
	echo "make run: FAILED: the verdicts above are not the expected ones"
	exit 1
fi
echo "make run: OK: capsules and records landed in their rooms, duplicates stored nothing, refusals named their code and line, every message was attested and every checkpoint verified, the proof checked offline, three witnesses cosigned the deployment log, the witnessed evidence checked offline and a split view was refused, the server stopped cleanly"
