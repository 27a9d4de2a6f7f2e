package node

import "testing"

func TestNextLeaderMove(t *testing.T) {
	all := []string{"n1", "n2", "n3"}
	for _, tc := range []struct {
		name  string
		views []leaderView
		want  leaderMove
		ok    bool
	}{
		{"spread already", []leaderView{{"A", "n1", all}, {"B", "n2", all}, {"C", "n3", all}}, leaderMove{}, false},
		{"two on one", []leaderView{{"A", "n1", all}, {"B", "n1", all}, {"C", "n3", all}}, leaderMove{"A", "n1", "n2"}, true},
		{"all on one", []leaderView{{"A", "n2", all}, {"B", "n2", all}, {"C", "n2", all}}, leaderMove{"A", "n2", "n1"}, true},
		{"four on three", []leaderView{{"A", "n1", all}, {"B", "n1", all}, {"C", "n2", all}, {"D", "n3", all}}, leaderMove{}, false},
		{"only a lagging replica free", []leaderView{{"A", "n1", []string{"n1", "n3"}}, {"B", "n1", []string{"n1", "n3"}}, {"C", "n3", all}}, leaderMove{}, false},
		{"one server", []leaderView{{"A", "n1", []string{"n1"}}, {"B", "n1", []string{"n1"}}}, leaderMove{}, false},
	} {
		got, ok := nextLeaderMove(tc.views)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: got %+v %v, want %+v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	// Moves applied one at a time end spread: 3 partitions over 3 servers.
	views := []leaderView{{"A", "n3", all}, {"B", "n3", all}, {"C", "n3", all}}
	for i := 0; ; i++ {
		m, ok := nextLeaderMove(views)
		if !ok {
			break
		}
		if i == 3 {
			t.Fatalf("still moving after 3 moves: %+v", views)
		}
		for j := range views {
			if views[j].stream == m.stream {
				views[j].leader = m.to
			}
		}
	}
	seen := map[string]bool{}
	for _, v := range views {
		seen[v.leader] = true
	}
	if len(seen) != 3 {
		t.Fatalf("not spread: %+v", views)
	}
}
