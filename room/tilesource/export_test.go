package tilesource

import "github.com/roompub/roompub/checkpoint"

// LeafStats is what r's ledger did with its leaves past its latest
// matching checkpoint; zero once r is closed.
func (r *Room) LeafStats() checkpoint.LeafStats {
	r.scanMu.Lock()
	defer r.scanMu.Unlock()
	if r.ledger == nil {
		return checkpoint.LeafStats{}
	}
	return r.ledger.LeafStats()
}
