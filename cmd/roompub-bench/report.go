package main

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/roompub/roompub/room/checkpointer"
)

// side is what one side (raw or roompub) did in a scenario: n items of
// bytes payload bytes in dur (the timed work only), using cpu of the
// process's CPU time (user + system, every goroutine: the embedded server
// and the client too) in that time.
type side struct {
	n     int
	bytes int64
	dur   time.Duration
	cpu   time.Duration
}

// cores is the CPU time per second of wall time: near GOMAXPROCS, the
// side was bound by CPU; well under it, by waiting (fsync, round trips).
func (s side) cores() float64 { return s.cpu.Seconds() / s.dur.Seconds() }

// cpuPerItem is the process's CPU time per item, in microseconds.
func (s side) cpuPerItem() float64 { return float64(s.cpu.Microseconds()) / float64(s.n) }

func (s side) rate() float64 { return float64(s.n) / s.dur.Seconds() }

// mbps is payload megabytes (10^6 bytes) per second.
func (s side) mbps() float64 { return float64(s.bytes) / 1e6 / s.dur.Seconds() }

func (s side) String() string {
	return fmt.Sprintf("%d in %.3fs (%.0f/s, %.1f MB/s; CPU %.2f cores, %.1f µs each)", s.n, s.dur.Seconds(), s.rate(), s.mbps(), s.cores(), s.cpuPerItem())
}

// result is one scenario's row.
type result struct {
	key    string // JSON key prefix
	name   string // table row
	unit   string // "entries" or "records"
	items  int    // how many were asked for, on each side, in all rounds
	rounds int    // rounds the items were done in (1: one)
	raw    side
	pub    side
	floor  float64 // the bench's floor for ratio
	// memory: the row reports audit's peak RSS (peakMiB) and peak live
	// heap (liveMiB), each under its cap unless that is 0.
	memory              bool
	peakMiB, peakCapMiB float64
	liveMiB, liveCapMiB float64
	// how says what each side did, for the notes under the table.
	rawHow, pubHow string
	extra          map[string]any // more JSON members, keyed without the prefix
	notes          []string       // more lines under the table
	// also are more rows the scenario measured, after this one in the
	// table (verify against sha256sum beside verify against its floor).
	also []*result
	// syncEntries were stored in one more chain for reference (long chain).
	syncEntries int

	ratio float64 // roompub throughput / raw throughput
	ok    bool
}

// count is the n column: the items, per round when there were rounds.
func (r *result) count() string {
	if r.rounds > 1 {
		return fmt.Sprintf("%d × %d %s", r.rounds, r.items/r.rounds, r.unit)
	}
	return fmt.Sprintf("%d %s", r.items, r.unit)
}

func (r *result) finish() {
	r.ratio = r.pub.rate() / r.raw.rate()
	r.ok = r.ratio >= r.floor && (r.peakCapMiB == 0 || r.peakMiB < r.peakCapMiB) && (r.liveCapMiB == 0 || r.liveMiB < r.liveCapMiB)
}

// memoryNote is the verdict's note on audit's memory: peak RSS and peak
// live heap, each with its cap.
func (r *result) memoryNote() string {
	capOf := func(c float64) string {
		if c == 0 {
			return "uncapped"
		}
		return fmt.Sprintf("cap %.0f", c)
	}
	return fmt.Sprintf("audit peak RSS %.0f MiB, %s; peak live heap %.1f MiB, %s", r.peakMiB, capOf(r.peakCapMiB), r.liveMiB, capOf(r.liveCapMiB))
}

func (r *result) verdict() string {
	if r.ok {
		return "ok"
	}
	return "BELOW"
}

func (r *result) verdictReason() string {
	var why []string
	if r.ratio < r.floor {
		why = append(why, fmt.Sprintf("ratio %.3f < %.2f", r.ratio, r.floor))
	}
	if r.peakCapMiB > 0 && r.peakMiB >= r.peakCapMiB {
		why = append(why, fmt.Sprintf("peak %.0f MiB >= %.0f MiB", r.peakMiB, r.peakCapMiB))
	}
	if r.liveCapMiB > 0 && r.liveMiB >= r.liveCapMiB {
		why = append(why, fmt.Sprintf("peak live heap %.0f MiB >= %.0f MiB", r.liveMiB, r.liveCapMiB))
	}
	return strings.Join(why, ", ")
}

func (b *bench) printTable(results []*result) {
	w := b.out.out
	env := b.environment()
	fmt.Fprintf(w, "roompub-bench: roompub against raw JetStream, one run, the same message bytes on both sides\n")
	sync := env["sync"]
	if sync == "always" {
		sync = "always (fsync before every ack)"
	}
	fmt.Fprintf(w, "%s, GOMAXPROCS %d, %s, sync: %s, store %s\n",
		env["go_version"], env["gomaxprocs"], b.serverNote(), sync, b.storeDir)
	if b.attested() {
		fmt.Fprintf(w, "attestation: on, as publisher serve --publisher-key (a key made for the run; a checkpointer every %d messages or %s and on stop); audit --trusted-publisher\n",
			checkpointer.DefaultCheckpointEvery, checkpointer.DefaultCheckpointInterval)
	}
	if b.witnessing() {
		fmt.Fprintf(w, "witnessed: on, as serve --origin --witness-policy (the deployment log cosigned by %d litewitness processes at most every %s while it grew); audit --witness-quorum %d of them\n",
			b.c.witnessCount(), checkpointer.DefaultDeploymentInterval, b.c.quorum())
	}
	if !b.attested() {
		fmt.Fprintf(w, "attestation: off (--no-attest: no publisher key, no checkpointer; audit without --trusted-publisher)\n")
	}
	if b.cluster != nil {
		fmt.Fprintf(w, "floors: none on a cluster (the floors are one server's; --check runs on one)\n")
	}
	if b.inflightNote != "" {
		fmt.Fprintf(w, "in flight: %s\n", b.inflightNote)
		fmt.Fprintf(w, "rounds: the write scenarios run %d rounds, raw first in odd rounds, roompub first in even ones; each side's work and time are added up\n", b.rounds)
	}
	fmt.Fprintln(w)
	nameW, nW := len("scenario"), len("n")
	for _, r := range results {
		nameW = max(nameW, utf8.RuneCountInString(r.name))
		nW = max(nW, len(r.count()))
	}
	fmt.Fprintf(w, "%-*s  %*s  %10s  %8s  %10s  %12s  %6s  %5s  %s\n", nameW, "scenario", nW, "n", "raw /s", "raw MB/s", "roompub /s", "roompub MB/s", "ratio", "floor", "verdict")
	for _, r := range results {
		verdict := r.verdict()
		if r.memory {
			verdict += " (" + r.memoryNote() + ")"
		}
		fmt.Fprintf(w, "%-*s  %*s  %10.0f  %8.1f  %10.0f  %12.1f  %6.3f  %5.2f  %s\n", nameW, r.name, nW, r.count(),
			r.raw.rate(), r.raw.mbps(), r.pub.rate(), r.pub.mbps(), r.ratio, r.floor, verdict)
	}
	fmt.Fprintln(w)
	for _, r := range results {
		fmt.Fprintf(w, "%s:\n  raw:     %s: %s\n  roompub: %s: %s\n", r.name, r.rawHow, r.raw, r.pubHow, r.pub)
		for _, n := range r.notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
}

// printModes prints the table of --modes: for each row of modeRows, a
// column per mode with roompub's throughput and its ratio to the raw side
// measured in the same pass, then the raw sides' throughputs.
func (b *bench) printModes(byMode map[string][]*result) {
	w := b.out.out
	find := func(mode, key string) *result {
		for _, r := range byMode[mode] {
			if r.key == key {
				return r
			}
		}
		return nil
	}
	var rows []*result // the main pass's, for names and sizes
	for _, r := range byMode[b.primary] {
		if slices.Contains(modeRows, strings.TrimSuffix(r.key, "_chain")) {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nmodes, the same sizes as above (run in the order %s; each mode's pass: its own roompub, started afresh, against a raw side measured in the same pass, raw first in odd rounds; the %s column is the table above):\n",
		strings.Join(b.c.Modes, ", "), b.primary)
	fmt.Fprintf(w, "  keyless: no publisher key; attested: serve --publisher-key, audit --trusted-publisher; witnessed: and --origin, a deployment log cosigned by %d litewitness processes, audit --witness-quorum %d\n",
		b.c.witnessCount(), b.c.quorum())
	nameW := len("scenario")
	for _, r := range rows {
		nameW = max(nameW, utf8.RuneCountInString(r.name))
	}
	fmt.Fprintf(w, "%-*s", nameW, "scenario")
	for _, m := range b.c.Modes {
		fmt.Fprintf(w, "  %*s  %6s", 12, m+" /s", "ratio")
	}
	for _, m := range b.c.Modes {
		fmt.Fprintf(w, "  %*s", 12, "raw ("+m[:1]+") /s")
	}
	fmt.Fprintln(w)
	for _, row := range rows {
		fmt.Fprintf(w, "%-*s", nameW, row.name)
		for _, m := range b.c.Modes {
			if r := find(m, row.key); r != nil {
				fmt.Fprintf(w, "  %12.0f  %6.3f", r.pub.rate(), r.ratio)
			} else {
				fmt.Fprintf(w, "  %12s  %6s", "-", "-")
			}
		}
		for _, m := range b.c.Modes {
			if r := find(m, row.key); r != nil {
				fmt.Fprintf(w, "  %12.0f", r.raw.rate())
			} else {
				fmt.Fprintf(w, "  %12s", "-")
			}
		}
		fmt.Fprintln(w)
	}
	if slices.Contains(b.all, modeAttested) && slices.Contains(b.all, modeWitnessed) {
		var parts []string
		for _, row := range rows {
			a, wi := find(modeAttested, row.key), find(modeWitnessed, row.key)
			if a != nil && wi != nil {
				parts = append(parts, fmt.Sprintf("%s %.3f", row.key, wi.ratio/a.ratio))
			}
		}
		fmt.Fprintf(w, "witnessed / attested (ratio over ratio): %s\n", strings.Join(parts, ", "))
	}
}

// round keeps d decimals.
func round(x float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.Round(x*p) / p
}

// printJSON writes the last line: every throughput and ratio, the counts
// both sides reached and the environment, in one flat object.
func (b *bench) printJSON(results []*result, more map[string]any, byMode map[string][]*result) error {
	obj := b.environment()
	for k, v := range more {
		obj[k] = v
	}
	if len(b.c.Modes) > 0 {
		// <row>_<mode>_…: each mode's throughputs and ratio, the main
		// mode's too (the same figures as <row>_…).
		for m, rs := range byMode {
			for _, r := range rs {
				if !slices.Contains(modeRows, strings.TrimSuffix(r.key, "_chain")) {
					continue
				}
				p := r.key + "_" + m + "_"
				obj[p+"ratio"] = round(r.ratio, 4)
				for name, s := range map[string]side{"raw": r.raw, "roompub": r.pub} {
					obj[p+name+"_count"] = s.n
					obj[p+name+"_per_s"] = round(s.rate(), 1)
					obj[p+name+"_cpu_us_each"] = round(s.cpuPerItem(), 1)
				}
				if r.memory {
					obj[p+"peak_rss_mib"] = round(r.peakMiB, 1)
					obj[p+"peak_live_heap_mib"] = round(r.liveMiB, 1)
				}
				if m != b.primary {
					for k, v := range r.extra {
						obj[p+k] = v
					}
				}
			}
		}
	}
	allOK := true
	for _, r := range results {
		p := r.key + "_"
		obj[p+"items"] = r.items
		obj[p+"unit"] = r.unit
		obj[p+"rounds"] = max(r.rounds, 1)
		for name, s := range map[string]side{"raw": r.raw, "roompub": r.pub} {
			obj[p+name+"_count"] = s.n
			obj[p+name+"_bytes"] = s.bytes
			obj[p+name+"_seconds"] = round(s.dur.Seconds(), 4)
			obj[p+name+"_per_s"] = round(s.rate(), 1)
			obj[p+name+"_mb_per_s"] = round(s.mbps(), 2)
			obj[p+name+"_cpu_cores"] = round(s.cores(), 2)
			obj[p+name+"_cpu_us_each"] = round(s.cpuPerItem(), 1)
		}
		obj[p+"ratio"] = round(r.ratio, 4)
		obj[p+"floor"] = r.floor
		obj[p+"ok"] = r.ok
		if r.memory {
			obj[p+"peak_rss_mib"] = round(r.peakMiB, 1)
			obj[p+"peak_live_heap_mib"] = round(r.liveMiB, 1)
		}
		if r.peakCapMiB > 0 {
			obj[p+"peak_rss_cap_mib"] = r.peakCapMiB
		}
		if r.liveCapMiB > 0 {
			obj[p+"peak_live_heap_cap_mib"] = r.liveCapMiB
		}
		for k, v := range r.extra {
			obj[p+k] = v
		}
		allOK = allOK && r.ok
	}
	obj["all_ok"] = allOK
	line, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(b.out.out, "%s\n", line)
	return err
}
