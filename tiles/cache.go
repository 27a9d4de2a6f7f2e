package tiles

import (
	"container/list"
	"sync"
)

// DefaultCacheBytes is the bound of the cache a Handler or Mux makes when
// Options.Cache is nil: 64 MiB, 8,192 full hash tiles.
const DefaultCacheBytes = 64 << 20

// entryOverhead is what one cached tile costs besides its bytes (key,
// list element, map slot), counted so the bound holds for memory, not
// just for payload.
const entryOverhead = 128

// Cache holds full hash tiles and full entry bundles, which never change
// (C2SP tlog-tiles: a full tile is immutable), least recently used first
// out. What it holds, each tile's length plus a fixed 128 bytes, never
// exceeds the bound given to NewCache, whatever the size or number of the
// logs sharing it; a tile larger than the bound is served but not kept.
// Partial tiles and checkpoints are never cached.
//
// Tiles of level 1 and above cost 256 (or more) level-0 tiles to rebuild,
// and rebuilding one pushes those 256 through the cache, so they are kept
// apart from level-0 tiles and bundles: under pressure each kind is
// evicted first while it holds more than half the bound, so neither can
// flush the other out. A Cache is safe for concurrent use and may be
// shared by many Handlers and Muxes.
type Cache struct {
	mu    sync.Mutex
	max   int64
	bytes int64
	peak  int64  // the most bytes ever held, for tests
	kinds [2]lru // cheap: level 0 and bundles; dear: level 1 and above
	items map[cacheKey]*list.Element
}

// lru is one kind of tile, most recently used first.
type lru struct {
	ll    list.List
	bytes int64
}

// kindOf is the lru a tile of level goes to.
func kindOf(level int) int {
	if level >= 1 {
		return 1
	}
	return 0
}

// cacheKey names a full tile of one log: owner is the Handler or Mux, name
// the log's segment below a Mux ("" for a Handler).
type cacheKey struct {
	owner uint64
	name  string
	level int
	index int64
}

type cacheItem struct {
	key  cacheKey
	data []byte
}

// NewCache returns an empty cache that holds at most maxBytes bytes
// (maxBytes <= 0 caches nothing).
func NewCache(maxBytes int64) *Cache {
	return &Cache{max: maxBytes, items: map[cacheKey]*list.Element{}}
}

// Bytes returns what the cache holds now, in bytes as the bound counts
// them: at most MaxBytes.
func (c *Cache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// MaxBytes returns the bound given to NewCache.
func (c *Cache) MaxBytes() int64 { return c.max }

// Len returns how many tiles the cache holds.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}

func (c *Cache) get(k cacheKey) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[k]
	if !ok {
		return nil, false
	}
	c.kinds[kindOf(k.level)].ll.MoveToFront(e)
	return e.Value.(*cacheItem).data, true
}

// add keeps data under k, evicting least recently used tiles until the
// bound holds. Callers never modify data afterwards.
func (c *Cache) add(k cacheKey, data []byte) {
	cost := int64(len(data)) + entryOverhead
	if cost > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	mine := kindOf(k.level)
	if e, ok := c.items[k]; ok {
		c.kinds[mine].ll.MoveToFront(e)
		return
	}
	for c.bytes+cost > c.max {
		c.evict(c.victim(mine))
	}
	c.items[k] = c.kinds[mine].ll.PushFront(&cacheItem{key: k, data: data})
	c.kinds[mine].bytes += cost
	c.bytes += cost
	c.peak = max(c.peak, c.bytes)
}

// victim is the kind to evict from to make room for a tile of kind mine:
// one holding more than half the bound, else mine, else the other.
func (c *Cache) victim(mine int) int {
	for k := range c.kinds {
		if c.kinds[k].bytes > c.max/2 {
			return k
		}
	}
	if c.kinds[mine].ll.Len() > 0 {
		return mine
	}
	return 1 - mine
}

func (c *Cache) evict(kind int) {
	l := &c.kinds[kind]
	e := l.ll.Back()
	it := e.Value.(*cacheItem)
	l.ll.Remove(e)
	delete(c.items, it.key)
	cost := int64(len(it.data)) + entryOverhead
	l.bytes -= cost
	c.bytes -= cost
}
