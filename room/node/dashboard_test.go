package node_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metricsql"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/node"
)

// dashboardPath is the Grafana dashboard shipped for serve's metrics.
const dashboardPath = "../../deploy/grafana/roompub.json"

// dashboard is the part of a Grafana dashboard JSON model the test reads.
type dashboard struct {
	SchemaVersion int `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []dashPanel `json:"panels"`
}

type dashPanel struct {
	Title      string      `json:"title"`
	Type       string      `json:"type"`
	Datasource *dashSource `json:"datasource"`
	Panels     []dashPanel `json:"panels"` // a collapsed row's
	Targets    []struct {
		Expr       string      `json:"expr"`
		RefID      string      `json:"refId"`
		Datasource *dashSource `json:"datasource"`
	} `json:"targets"`
}

type dashSource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// grafanaVars are the variables the dashboard's expressions use, with a
// value that makes them PromQL: Grafana substitutes them before the query
// reaches Prometheus.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "${job}", ".+", "$job", ".+")

// labelValuesVar is a Grafana variable query on one metric's label.
var labelValuesVar = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)$`)

// dashboardSeries checks the dashboard's form (schema version, the
// ${datasource} Prometheus variable, every panel on it) and returns every
// metric name its expressions select, by the panel that uses it, each
// expression parsed as PromQL.
func dashboardSeries(raw []byte) (map[string][]string, error) {
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("dashboard JSON: %w", err)
	}
	if d.SchemaVersion < 39 {
		return nil, fmt.Errorf("schemaVersion %d, want 39 or newer", d.SchemaVersion)
	}
	names := map[string][]string{}
	hasDS := false
	for _, v := range d.Templating.List {
		switch {
		case v.Name == "datasource":
			hasDS = v.Type == "datasource" && string(v.Query) == `"prometheus"`
		case v.Type == "query":
			m := labelValuesVar.FindStringSubmatch(v.Definition)
			if m == nil {
				return nil, fmt.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, v.Definition)
			}
			names[m[1]] = append(names[m[1]], "variable "+v.Name)
		}
	}
	if !hasDS {
		return nil, fmt.Errorf("no datasource variable of type prometheus named datasource")
	}
	var walk func([]dashPanel) error
	exprs := 0
	walk = func(ps []dashPanel) error {
		for _, p := range ps {
			if p.Type == "row" {
				if err := walk(p.Panels); err != nil {
					return err
				}
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" || p.Datasource.Type != "prometheus" {
				return fmt.Errorf("panel %q: datasource %+v, want prometheus ${datasource}", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				return fmt.Errorf("panel %q has no target", p.Title)
			}
			for _, tg := range p.Targets {
				if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
					return fmt.Errorf("panel %q target %s: datasource %+v", p.Title, tg.RefID, tg.Datasource)
				}
				e, err := metricsql.Parse(grafanaVars.Replace(tg.Expr))
				if err != nil {
					return fmt.Errorf("panel %q target %s: %q: %w", p.Title, tg.RefID, tg.Expr, err)
				}
				exprs++
				found := 0
				metricsql.VisitAll(e, func(x metricsql.Expr) {
					me, ok := x.(*metricsql.MetricExpr)
					if !ok {
						return
					}
					for _, lfs := range me.LabelFilterss {
						for _, lf := range lfs {
							if lf.Label == "__name__" && !lf.IsRegexp && !lf.IsNegative {
								names[lf.Value] = append(names[lf.Value], p.Title)
								found++
							}
						}
					}
				})
				if found == 0 {
					return fmt.Errorf("panel %q target %s: %q selects no metric by name", p.Title, tg.RefID, tg.Expr)
				}
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	if exprs == 0 {
		return nil, fmt.Errorf("the dashboard has no expression")
	}
	return names, nil
}

// missingSeries returns the names of names that families does not expose,
// sorted: a histogram's name with _bucket, _sum or _count, a summary's
// with _sum or _count, any other family by its own name.
func missingSeries(names map[string][]string, families map[string]*dto.MetricFamily) []string {
	var missing []string
	for n := range names {
		if mf, ok := families[n]; ok && len(mf.GetMetric()) > 0 {
			continue
		}
		ok := false
		for suffix, types := range map[string][]dto.MetricType{
			"_bucket": {dto.MetricType_HISTOGRAM},
			"_sum":    {dto.MetricType_HISTOGRAM, dto.MetricType_SUMMARY},
			"_count":  {dto.MetricType_HISTOGRAM, dto.MetricType_SUMMARY},
		} {
			if base, cut := strings.CutSuffix(n, suffix); cut {
				if mf, found := families[base]; found && slices.Contains(types, mf.GetType()) && len(mf.GetMetric()) > 0 {
					ok = true
				}
			}
		}
		if !ok {
			missing = append(missing, n)
		}
	}
	slices.Sort(missing)
	return missing
}

// TestDashboardSeriesAreExposed runs serve with a publisher key, does a
// little of everything (a capsule, a refused line, a record, a
// checkpoint), scrapes /metrics and holds deploy/grafana/roompub.json to
// it: every expression parses as PromQL and every metric it selects is a
// series serve exposes. A dashboard naming a series serve does not
// expose fails.
func TestDashboardSeriesAreExposed(t *testing.T) {
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	names, err := dashboardSeries(raw)
	if err != nil {
		t.Fatal(err)
	}

	pub := roomtest.NewPublisherKey(t)
	s := startServeWith(t, time.Hour, func(o *node.ServeOptions, _ *events.HostKey) {
		o.PublisherKey = pub
		o.Checkpoint = checkpointer.Options{Every: 5, Interval: 200 * time.Millisecond}
	})
	const roomID = "room:dashboard"
	_, body := roomtest.Journal(t, "run-dash", "cap-dash", 6)
	if r := s.shipJournal(roomID, body); r.Stored != 6 {
		t.Fatalf("capsule: %+v", r)
	}
	_, more := roomtest.Journal(t, "run-dash", "cap-dash", 7)
	if r := s.shipJournal(roomID, roomtest.ReplaceOnce(t, more[len(body):], `"status":"ok"`, `"status":"no"`)); r.Refused != 1 || r.Items[0].Code != events.InvalidEntry {
		t.Fatalf("tampered line: %+v", r)
	}
	if r := s.shipRecord(roomtest.ReferenceBytes(t, "verified.json")); r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("record: %+v", r)
	}

	var families map[string]*dto.MetricFamily
	scrape := func() map[string]*dto.MetricFamily {
		t.Helper()
		code, text := s.get("/metrics")
		if code != 200 {
			t.Fatalf("/metrics: %d %s", code, text)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(strings.NewReader(text))
		if err != nil {
			t.Fatalf("parse /metrics: %v", err)
		}
		return fams
	}
	gauge := func(name string, labels ...string) float64 {
		mf := families[name]
		for _, m := range mf.GetMetric() {
			ok := len(m.GetLabel())*2 == len(labels)
			for _, l := range m.GetLabel() {
				i := slices.Index(labels, l.GetName())
				ok = ok && i >= 0 && i%2 == 0 && labels[i+1] == l.GetValue()
			}
			if !ok {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
		return -1
	}
	// The room's checkpoint: 7 leaves (6 entries, 1 record), written
	// within the interval, and read back: nothing lags.
	roomtest.WaitFor(t, 10*time.Second, "a checkpoint covering the room", func() bool {
		families = scrape()
		return gauge("roompub_checkpoints_written_total") >= 1 && gauge("roompub_checkpoint_lag_max_messages") == 0
	})

	// Real values, not only names.
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"roompub_items_total", []string{"kind", "journal", "outcome", "stored"}, 6},
		{"roompub_items_total", []string{"kind", "journal", "outcome", "refused"}, 1},
		{"roompub_items_total", []string{"kind", "execution", "outcome", "stored"}, 1},
		{"roompub_refusals_total", []string{"kind", "journal", "code", "invalid_entry"}, 1},
		{"roompub_item_duration_seconds", []string{"kind", "journal", "outcome", "stored"}, 6},
		{"roompub_checkpoint_lagging_rooms", nil, 0},
		{"roompub_gate_paused", nil, 0},
		{"roompub_stream_guard_ok", nil, 1},
		{"roompub_nats_connected", nil, 1},
		{"roompub_jetstream_api_ok", nil, 1},
		{"roompub_store_lost_messages", nil, 0},
	} {
		if got := gauge(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// The stream: 6 entries, the record, at least the one checkpoint.
	if n := gauge("roompub_stream_stored_messages"); n < 8 || n != float64(s.count()) {
		t.Errorf("roompub_stream_stored_messages = %v, want the stream's %d (at least 8)", n, s.count())
	}
	if used, b := gauge("roompub_jetstream_storage_used_bytes"), gauge("roompub_stream_stored_bytes"); b <= 0 || used < b {
		t.Errorf("storage: account uses %v bytes, the room stream holds %v: want the stream's bytes within the account's", used, b)
	}
	if lim := gauge("roompub_jetstream_storage_limit_bytes"); lim != -1 && lim <= 0 {
		t.Errorf("roompub_jetstream_storage_limit_bytes = %v, want -1 or a limit", lim)
	}

	if missing := missingSeries(names, families); len(missing) > 0 {
		for _, n := range missing {
			t.Errorf("the dashboard selects %s (panels %q), which serve does not expose", n, names[n])
		}
	}
	t.Logf("%d metric names in the dashboard, all exposed among %d families", len(names), len(families))

	t.Run("a series serve does not expose fails", func(t *testing.T) {
		bad := bytes.Replace(raw, []byte("roompub_checkpoint_lag_max_seconds{"), []byte("roompub_checkpoint_lag_seconds{"), 1)
		if bytes.Equal(bad, raw) {
			t.Fatal("the dashboard has no roompub_checkpoint_lag_max_seconds selector to rename")
		}
		badNames, err := dashboardSeries(bad)
		if err != nil {
			t.Fatal(err)
		}
		if got := missingSeries(badNames, families); !slices.Equal(got, []string{"roompub_checkpoint_lag_seconds"}) {
			t.Fatalf("missing %v, want exactly the renamed series", got)
		}
		// A histogram's suffixes stand for it; a counter's do not.
		if got := missingSeries(map[string][]string{"roompub_item_duration_seconds_bucket": nil, "roompub_items_total_sum": nil}, families); !slices.Equal(got, []string{"roompub_items_total_sum"}) {
			t.Fatalf("missing %v, want only the counter's _sum", got)
		}
	})
	t.Run("an expression that is not PromQL fails", func(t *testing.T) {
		bad := bytes.Replace(raw, []byte("max(roompub_gate_paused{"), []byte("max(roompub_gate_paused{{"), 1)
		if _, err := dashboardSeries(bad); err == nil || !strings.Contains(err.Error(), "roompub_gate_paused") {
			t.Fatalf("dashboardSeries of a broken expression: %v", err)
		}
	})
}
