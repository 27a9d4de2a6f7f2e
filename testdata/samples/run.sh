#!/usr/bin/env bash
# Runs `publisher verify` over the bundled samples, as `make run` does, and
# checks every verdict: the good capsules and records must be accepted, the
# tampered capsule and the foreign-evidence record refused with their codes.
# Exits 0 only when every verdict and the exit status are as expected.
#
#   testdata/samples/run.sh [PUBLISHER]     (default bin/publisher)
set -euo pipefail

publisher=${1:-bin/publisher}
s=testdata/samples

# path  expected verdict: "ok" or the refusal code
expected=(
	"$s/capsules/slugify-run" ok
	"$s/capsules/csv-dedupe" ok
	"$s/records/verified.json" ok
	"$s/records/refused.json" ok
	"$s/capsules/broken" invalid_entry
	"$s/records/foreign-evidence.json" foreign_evidence
)
paths=()
for ((i = 0; i < ${#expected[@]}; i += 2)); do
	paths+=("${expected[i]}")
done

echo "\$ publisher verify ${paths[*]}"
status=0
output=$("$publisher" verify "${paths[@]}" 2>&1) || status=$?
printf '%s\n' "$output"
echo

fail=0 accepted=0 refused=0
echo "Verdicts:"
for ((i = 0; i < ${#expected[@]}; i += 2)); do
	path=${expected[i]} want=${expected[i + 1]}
	# A report line is "ok KIND PATH  ..." or "REFUSED KIND PATH: CODE at ...".
	got=$(awk -v p="$path" '$1 == "ok" && $3 == p { print "ok" } $1 == "REFUSED" && $3 == p ":" { print $4 }' <<<"$output")
	if [[ $got == "$want" ]]; then
		if [[ $want == ok ]]; then ((++accepted)); else ((++refused)); fi
		printf '  as expected  %-17s %s\n' "$want" "$path"
	else
		printf '  UNEXPECTED   %-17s %s (expected %s)\n' "${got:-nothing}" "$path" "$want"
		fail=1
	fi
done
if [[ $status -ne 1 ]]; then
	echo "  UNEXPECTED   exit status $status (expected 1: some inputs are refused)"
	fail=1
else
	echo "  as expected  exit status 1 (some inputs are refused)"
fi
echo
if [[ $fail -ne 0 ]]; then
	echo "make run: FAILED: the verdicts above are not the expected ones"
	exit 1
fi
echo "make run: OK: $accepted inputs accepted, $refused refused with the expected codes"
