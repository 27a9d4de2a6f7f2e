package node_test

import (
	"bufio"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestServiceDiscovery is `nats micro ls` / `nats micro info`: the ingest
// service answers $SRV.PING and $SRV.INFO with its name, id, endpoints and
// their subjects.
func TestServiceDiscovery(t *testing.T) {
	e := roomtest.NewEnv(t)
	id := e.Svc.Info().ID

	// $SRV.PING: every service on the server answers (here, one).
	sub, err := e.Nc.SubscribeSync(e.Nc.NewRespInbox())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Nc.PublishRequest("$SRV.PING", sub.Subject, nil); err != nil {
		t.Fatal(err)
	}
	var pings []micro.Ping
	for {
		m, err := sub.NextMsg(300 * time.Millisecond)
		if err != nil {
			break
		}
		var p micro.Ping
		if err := json.Unmarshal(m.Data, &p); err != nil {
			t.Fatal(err)
		}
		pings = append(pings, p)
	}
	if len(pings) != 1 || pings[0].Name != room.ServiceName || pings[0].ID != id || pings[0].Type != micro.PingResponseType {
		t.Fatalf("pings: %+v", pings)
	}

	// $SRV.INFO.roompub-ingest: the endpoints.
	subj, err := micro.ControlSubject(micro.InfoVerb, room.ServiceName, "")
	if err != nil || subj != "$SRV.INFO.roompub-ingest" {
		t.Fatalf("control subject %q %v", subj, err)
	}
	resp, err := e.Nc.Request(subj, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(resp.Data, &info); err != nil {
		t.Fatal(err)
	}
	if info.Name != "roompub-ingest" || info.ID != id || info.Type != micro.InfoResponseType || info.Version != e.Svc.Info().Version ||
		info.Metadata["stream"] != "ROOMS" || info.Metadata["subjects"] != "rooms.>" {
		t.Fatalf("info: %+v", info)
	}
	got := map[string]string{}
	for _, ep := range info.Endpoints {
		got[ep.Name] = ep.Subject + " " + ep.QueueGroup
		if ep.Metadata["description"] == "" {
			t.Fatalf("endpoint %s has no description", ep.Name)
		}
	}
	want := map[string]string{
		"journal":   "roompub.v1.journal q",
		"execution": "roompub.v1.execution q",
		"records":   "roompub.v1.records q",
		"head":      "roompub.v1.head q",
		// The same, for each named identity (docs/secure-mode.md).
		"identity-journal":   "roompub.v1.*.journal q",
		"identity-execution": "roompub.v1.*.execution q",
		"identity-records":   "roompub.v1.*.records q",
		"identity-head":      "roompub.v1.*.head q",
	}
	if len(got) != len(want) || len(info.Endpoints) != 8 {
		t.Fatalf("endpoints %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("endpoints %v, want %v", got, want)
		}
	}
	// The same by id.
	subj, _ = micro.ControlSubject(micro.InfoVerb, room.ServiceName, id)
	if resp, err = e.Nc.Request(subj, nil, 5*time.Second); err != nil || !strings.Contains(string(resp.Data), `"id":"`+id+`"`) {
		t.Fatalf("info by id: %s %v", resp.Data, err)
	}
	// After Stop, nothing answers.
	if err := e.Svc.Stop(); err != nil {
		t.Fatal(err)
	}
	e.Svc = nil
	if _, err := e.Nc.Request("$SRV.INFO.roompub-ingest", nil, 300*time.Millisecond); err == nil {
		t.Fatal("a stopped service still answers")
	}
}

// metrics parses a Prometheus text exposition into "name{labels}" → value,
// for the roompub_ series.
func metrics(t *testing.T, text string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "roompub_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func TestServeMetrics(t *testing.T) {
	s := startServe(t, time.Minute)
	entries, body := roomtest.Journal(t, "run-1", "cap-1", 4)
	// 4 stored, then 4 duplicate, then 1 refused (reordered) + 1 skipped.
	if r := s.shipJournal("room:alpha", body); r.Stored != 4 {
		t.Fatalf("ship: %+v", r)
	}
	if r := s.shipJournal("room:alpha", body); r.Dupes != 4 {
		t.Fatalf("again: %+v", r)
	}
	more, _ := roomtest.Journal(t, "run-1", "cap-1", 7)
	if r := s.shipJournal("room:alpha", roomtest.Lines(more[5:])); r.Refused != 1 || r.Skipped != 1 {
		t.Fatalf("gap: %+v", r)
	}
	// A fork and a room conflict.
	alt, err := events.NewEntry(roomtest.Mutate(entries[0].Object(), "kind", "other.kind"))
	if err != nil {
		t.Fatal(err)
	}
	if r := s.shipJournal("room:alpha", roomtest.Lines([]*events.Entry{alt})); r.Items[0].Code != events.Fork {
		t.Fatalf("fork: %+v", r)
	}
	if r := s.shipJournal("room:beta", body); r.Items[0].Code != events.RoomConflict {
		t.Fatalf("room conflict: %+v", r)
	}
	// Records: stored, duplicate, refused.
	rec := roomtest.ReferenceBytes(t, "verified.json")
	if r := s.shipRecord(rec); r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("record: %+v", r)
	}
	if r := s.shipRecord(rec); r.Item.Outcome != room.OutcomeDuplicate {
		t.Fatalf("record again: %+v", r)
	}
	if r := s.shipRecord(roomtest.ReferenceBytes(t, "foreign-evidence.json")); r.Item.Code != events.ForeignEvidence {
		t.Fatalf("foreign: %+v", r)
	}
	// A bad request decides no item and counts nothing.
	var er room.ErrorReply
	if code := roomtest.Request(t, s.nc, roomtest.SubjJournal, nil, body, &er); code != "400" {
		t.Fatalf("bad request: %s", code)
	}

	code, text := s.get("/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	m := metrics(t, text)
	want := map[string]float64{
		`roompub_items_total{kind="journal",outcome="stored"}`:                 4,
		`roompub_items_total{kind="journal",outcome="duplicate"}`:              4,
		`roompub_items_total{kind="journal",outcome="refused"}`:                3,
		`roompub_items_total{kind="execution",outcome="stored"}`:               1,
		`roompub_items_total{kind="execution",outcome="duplicate"}`:            1,
		`roompub_items_total{kind="execution",outcome="refused"}`:              1,
		`roompub_refusals_total{code="reordered",kind="journal"}`:              1,
		`roompub_refusals_total{code="fork",kind="journal"}`:                   1,
		`roompub_refusals_total{code="room_conflict",kind="journal"}`:          1,
		`roompub_refusals_total{code="foreign_evidence",kind="execution"}`:     1,
		`roompub_item_duration_seconds_count{kind="journal",outcome="stored"}`: 4,
	}
	var keys []string
	for k := range m {
		if strings.HasPrefix(k, "roompub_items_total") || strings.HasPrefix(k, "roompub_refusals_total") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	// Skipped items are not decided and not counted (metrics.go's doc
	// lists "skipped" among the outcomes, but the gate never reports one).
	if len(keys) != len(want)-1 {
		t.Errorf("series %v, want exactly those of %v", keys, want)
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", text)
	}
	if code, body := s.get("/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("healthz: %d %q", code, body)
	}
	s.stop()
}
