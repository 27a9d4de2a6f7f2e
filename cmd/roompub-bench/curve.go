package main

import (
	"encoding/json"
	"fmt"
)

// curveDefaults are each curve's points when --points names none.
var curveDefaults = map[string][]int{
	"chain-length": {10, 100, 1000, 10000, 100000, 1000000},
	"chains":       {1, 10, 100, 1000, 10000},
	"rooms":        {1, 10, 100, 1000, 10000},
}

// curvePoint is one measured point of a curve: x (entries of the chain,
// chains, or rooms) and the row measured there.
type curvePoint struct {
	x int
	r *result
}

// curve measures --curve at each of its points (docs/performance.md,
// "Cost curves"): the long chain row at x entries (chain-length), the
// parallel row of x chains sharing --curve-entries (chains), or of
// --curve-chains chains spread over x rooms (rooms). Each point runs on
// write streams made afresh and a roompub started afresh, raw and roompub
// in alternating rounds as in the table, so no point inherits another's
// stream. It prints a table and one line of JSON.
func (b *bench) curve() error {
	points := b.c.Points
	if len(points) == 0 {
		points = curveDefaults[b.c.Curve]
	}
	var out []curvePoint
	for _, x := range points {
		b.sz = b.c.sizes()
		row := b.parallel
		switch b.c.Curve {
		case "chain-length":
			b.sz.chainEntries, row = x, b.longChain
		case "chains":
			b.sz.chains, b.sz.chainLength = x, max(1, b.c.CurveEntries/x)
		case "rooms":
			b.sz.chains, b.sz.chainLength, b.sz.rooms = b.c.CurveChains, max(1, b.c.CurveEntries/b.c.CurveChains), x
		}
		r, err := row()
		if err != nil {
			return fmt.Errorf("curve %s at %d: %w", b.c.Curve, x, err)
		}
		r.finish()
		b.logf("curve %s at %d: %s: raw %s, roompub %s, ratio %.3f", b.c.Curve, x, r.name, r.raw, r.pub, r.ratio)
		out = append(out, curvePoint{x: x, r: r})
		if err := b.endRoompub(); err != nil {
			return err
		}
	}
	return b.printCurve(out)
}

// printCurve prints a curve's table (throughput, ratio and CPU time per
// entry of each side at each point) and its JSON line.
func (b *bench) printCurve(pts []curvePoint) error {
	w := b.out.out
	env := b.environment()
	fmt.Fprintf(w, "roompub-bench --curve %s: roompub against raw JetStream at each point, rounds per point: %d (raw first in odd rounds)\n", b.c.Curve, b.rounds)
	fmt.Fprintf(w, "%s, GOMAXPROCS %d, %s, sync: %s\n", env["go_version"], env["gomaxprocs"], b.serverNote(), env["sync"])
	xw := max(9, len(b.c.Curve))
	fmt.Fprintf(w, "%*s  %-36s  %10s  %10s  %6s  %12s  %12s\n", xw, b.c.Curve, "row", "raw /s", "roompub /s", "ratio", "raw µs/each", "pub µs/each")
	var js []map[string]any
	for _, p := range pts {
		fmt.Fprintf(w, "%*d  %-36s  %10.0f  %10.0f  %6.3f  %12.1f  %12.1f\n", xw, p.x, p.r.name, p.r.raw.rate(), p.r.pub.rate(), p.r.ratio, p.r.raw.cpuPerItem(), p.r.pub.cpuPerItem())
		js = append(js, map[string]any{
			"x": p.x, "row": p.r.key, "items": p.r.items, "ratio": round(p.r.ratio, 4),
			"raw_per_s": round(p.r.raw.rate(), 1), "roompub_per_s": round(p.r.pub.rate(), 1),
			"raw_cpu_us_each": round(p.r.raw.cpuPerItem(), 1), "roompub_cpu_us_each": round(p.r.pub.cpuPerItem(), 1),
		})
	}
	env["curve"], env["points"], env["attested"] = b.c.Curve, js, b.attested()
	line, err := json.Marshal(env)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", line)
	return err
}
