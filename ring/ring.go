package ring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

// Defaults for the zero fields of a Config.
const (
	DefaultPartitions        = 1021 // prime
	DefaultReplicationFactor = 40
	DefaultLoad              = 1.25
)

// Errors callers can test for with errors.Is.
var (
	// ErrNoMembers is returned by Owner on a ring without members.
	ErrNoMembers = errors.New("ring: no members")
	// ErrTooManyMembers is returned by New when the partitions cannot be
	// spread over the members, because there are more members than
	// partitions.
	ErrTooManyMembers = errors.New("ring: too many members for the partitions")
	// ErrInvalidMember is returned by New for an empty or repeated member
	// name.
	ErrInvalidMember = errors.New("ring: invalid member name")
	// ErrHashCollision is returned by New when two replica points of the
	// members hash to the same 64-bit value (rare; renaming a member fixes
	// it). The library would silently give one member's point to the other.
	ErrHashCollision = errors.New("ring: replica points collide")
)

// Config sets how keys are spread over members. Every member of a cluster
// must use the same Config, or the members disagree about owners. The zero
// value is valid and means DefaultConfig.
type Config struct {
	// Partitions is the number of partitions keys hash into: a key belongs
	// to partition xxhash(key) mod Partitions, and ownership moves a whole
	// partition at a time. More partitions balance load more finely; a ring
	// holds 16 bytes per partition and New does O(Partitions × log points)
	// work. A ring cannot have more members than partitions. A prime
	// spreads keys best. Zero means DefaultPartitions (1021).
	Partitions int

	// ReplicationFactor is the number of points each member gets on the
	// hash circle. More points even out the arcs members own before the
	// load bound applies, at the cost of members × ReplicationFactor hashes
	// in New. Zero means DefaultReplicationFactor (40); otherwise at least
	// 2 (with one point per member the library can fail to place a
	// partition even when a member has room).
	ReplicationFactor int

	// Load bounds the partitions one member may own to
	// ceil(floor(Partitions/members) × Load). Closer to 1 balances load
	// more evenly but moves more keys when membership changes, since a full
	// member's partitions spill over to its neighbours. Zero means
	// DefaultLoad (1.25); otherwise it must be greater than 1.
	Load float64
}

// DefaultConfig returns the Config the zero value stands for.
func DefaultConfig() Config {
	return Config{
		Partitions:        DefaultPartitions,
		ReplicationFactor: DefaultReplicationFactor,
		Load:              DefaultLoad,
	}
}

// withDefaults returns c with each zero field replaced by its default.
func (c Config) withDefaults() Config {
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = DefaultReplicationFactor
	}
	if c.Load == 0 {
		c.Load = DefaultLoad
	}
	return c
}

// Validate reports whether c, with its zero fields defaulted, is usable.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.Partitions < 1 {
		return fmt.Errorf("ring: partitions must be ≥ 1, got %d", c.Partitions)
	}
	if c.ReplicationFactor < 2 {
		return fmt.Errorf("ring: replication factor must be ≥ 2, got %d", c.ReplicationFactor)
	}
	if !(c.Load > 1) || math.IsInf(c.Load, 0) {
		return fmt.Errorf("ring: load must be a finite number > 1, got %v", c.Load)
	}
	return nil
}

// Ring is an immutable snapshot of which member owns which key. Its
// ownership never changes once built, so it is safe for concurrent use by
// any number of goroutines; only Successors takes a lock, to build and
// cache the smaller rings it reads. The zero Ring, and a nil *Ring, are
// empty rings: Owner answers ErrNoMembers and Version is 0.
type Ring struct {
	// table[p] is the name of the owner of partition p; nil when empty.
	table   []string
	names   []string // sorted member names
	version uint64
	cfg     Config // with defaults; what Successors builds smaller rings with

	// subs caches the rings Successors reads; see successors.go.
	subs withoutCache
}

// member is how a node is handed to the library. key is a collision-free
// encoding of name, so that the library's replica strings key+"0",
// key+"1", ... of two different members never coincide.
type member struct {
	name string
	key  string
}

// String returns the member's library key. It is not the node name.
func (m member) String() string { return m.key }

// memberKey encodes name as "<len>:<name>|". The encoding is uniquely
// decodable even with a replica number appended: the length says where the
// name ends, so "6:node-1|12" and "7:node-11|2" cannot be the same string.
func memberKey(name string) string {
	return strconv.Itoa(len(name)) + ":" + name + "|"
}

// hasher adapts xxhash to the library.
type hasher struct{}

func (hasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

// New builds the ring of the given members under cfg. Names must be
// non-empty and distinct; their order does not matter. With no members
// New returns an empty ring. It fails with ErrTooManyMembers when there are
// more members than cfg's partitions, and never panics.
func New(cfg Config, members []string) (*Ring, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()

	names := slices.Clone(members)
	slices.Sort(names)
	for i, n := range names {
		if n == "" {
			return nil, fmt.Errorf("%w: empty name", ErrInvalidMember)
		}
		if i > 0 && names[i-1] == n {
			return nil, fmt.Errorf("%w: %q listed twice", ErrInvalidMember, n)
		}
	}
	if len(names) == 0 {
		// The library panics when given an empty non-nil member list.
		return &Ring{}, nil
	}
	if len(names) > cfg.Partitions {
		return nil, fmt.Errorf("%w: %d members, %d partitions", ErrTooManyMembers, len(names), cfg.Partitions)
	}

	ms := make([]consistent.Member, len(names))
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = memberKey(n)
		ms[i] = member{name: n, key: keys[i]}
	}
	if err := checkPoints(keys, cfg.ReplicationFactor, xxhash.Sum64); err != nil {
		return nil, err
	}
	c, err := distribute(ms, consistent.Config{
		Hasher:            hasher{},
		PartitionCount:    cfg.Partitions,
		ReplicationFactor: cfg.ReplicationFactor,
		Load:              cfg.Load,
	})
	if err != nil {
		return nil, err
	}

	table := make([]string, cfg.Partitions)
	for p := range table {
		m, ok := c.GetPartitionOwner(p).(member)
		if !ok {
			return nil, fmt.Errorf("ring: library left partition %d without an owner", p)
		}
		table[p] = m.name
	}
	return &Ring{table: table, names: names, version: version(cfg, keys), cfg: cfg}, nil
}

// checkPoints returns ErrHashCollision unless the replica points of the
// members with the given library keys are all distinct under sum. It
// computes the points exactly as the library does.
func checkPoints(keys []string, replication int, sum func([]byte) uint64) error {
	type point struct {
		key     string
		replica int
	}
	seen := make(map[uint64]point, len(keys)*replication)
	for _, k := range keys {
		for i := range replication {
			h := sum([]byte(fmt.Sprintf("%s%d", k, i)))
			if other, dup := seen[h]; dup {
				return fmt.Errorf("%w: replica %d of member %q and replica %d of member %q both hash to %#x",
					ErrHashCollision, other.replica, other.key, i, k, h)
			}
			seen[h] = point{k, i}
		}
	}
	return nil
}

// notEnoughRoom is the library's panic value when it cannot place a
// partition on any member.
const notEnoughRoom = "not enough room to distribute partitions"

// distribute calls the library, turning its panics into errors.
func distribute(ms []consistent.Member, cfg consistent.Config) (c *consistent.Consistent, err error) {
	defer func() {
		if p := recover(); p != nil {
			c = nil
			if p == notEnoughRoom {
				err = fmt.Errorf("%w: cannot spread %d partitions over %d members (library: %v)",
					ErrTooManyMembers, cfg.PartitionCount, len(ms), p)
				return
			}
			err = fmt.Errorf("ring: consistent hashing library panicked: %v", p)
		}
	}()
	return consistent.New(ms, cfg), nil
}

// version hashes the Config and the sorted library keys of the members.
// It is never 0, which stands for the empty ring.
func version(cfg Config, keys []string) uint64 {
	d := xxhash.New()
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(cfg.Partitions))
	binary.LittleEndian.PutUint64(b[8:], uint64(cfg.ReplicationFactor))
	binary.LittleEndian.PutUint64(b[16:], math.Float64bits(cfg.Load))
	d.Write(b[:])
	for _, k := range keys {
		d.WriteString(k)
	}
	if v := d.Sum64(); v != 0 {
		return v
	}
	return 1
}

// Owner returns the name of the member that owns key, or ErrNoMembers when
// the ring is empty. It takes no lock and does not allocate.
func (r *Ring) Owner(key string) (string, error) {
	if r == nil || len(r.table) == 0 {
		return "", ErrNoMembers
	}
	return r.table[xxhash.Sum64String(placement(key))%uint64(len(r.table))], nil
}

// Partition returns the partition of key on a ring of the given number of
// partitions (len(Partitions())): the index whose owner Owner(key) names.
// A client that holds a node's partition table finds a key's owner with it
// exactly as the node does. It panics when partitions < 1.
func Partition(key string, partitions int) int {
	return int(xxhash.Sum64String(placement(key)) % uint64(partitions))
}

// inlineTag begins the keys of inline checks in the store:
// "i|" + the limit's spec (no '|' in it) + "|" + the caller's key (see
// bucket.InlineKey; this package imports no other, so the tag is spelled
// here and a test keeps the two the same).
const inlineTag = "i|"

// placement is the part of key the ring hashes: the caller's key of an
// inline key, so that every limit a caller names for one key is decided by
// the same member (the one GET /v1/owner?key= names), and the whole key
// otherwise.
func placement(key string) string {
	if len(key) > len(inlineTag) && key[:len(inlineTag)] == inlineTag {
		if i := strings.IndexByte(key[len(inlineTag):], '|'); i >= 0 {
			return key[len(inlineTag)+i+1:]
		}
	}
	return key
}

// Members returns the member names in sorted order, in a new slice the
// caller may keep. It is nil for an empty ring.
func (r *Ring) Members() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.names)
}

// Partitions returns the owner of each partition, in partition order, in a
// new slice the caller may keep: a key belongs to partition xxhash(key) mod
// len(Partitions()). It is nil for an empty ring.
func (r *Ring) Partitions() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.table)
}

// Len returns the number of members.
func (r *Ring) Len() int {
	if r == nil {
		return 0
	}
	return len(r.names)
}

// Has reports whether name is a member.
func (r *Ring) Has(name string) bool {
	if r == nil {
		return false
	}
	_, ok := slices.BinarySearch(r.names, name)
	return ok
}

// Version identifies the ring's ownership mapping: it is the same on every
// node that built a ring from the same member names under the same Config,
// and differs (up to 64-bit hash collisions) when members differ. It is 0
// only for the empty ring.
func (r *Ring) Version() uint64 {
	if r == nil {
		return 0
	}
	return r.version
}

// InlinePartition returns the partition of every inline check of key (the
// key as the check names it, before the node adds its namespace and the
// limit's spec): Partition of the stored key, without building it.
func InlinePartition(key string, partitions int) int {
	return int(xxhash.Sum64String(key) % uint64(partitions))
}
