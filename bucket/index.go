package bucket

// index maps a key's hash to its slot in the shard's pages: an
// open-addressing table with linear probing and backward-shift deletion.
// Each cell packs the low 32 bits of the key's hash (the tag) above slot+1;
// zero is an empty cell. A tag match is confirmed by comparing the key, so
// keys whose hashes collide are simply stored apart. At most 3/4 full, it
// costs 8 to 16 bytes per key, against about 40 for a Go map of the same.
type index struct {
	cells []uint64
	n     int
}

func (x *index) init(hint int) {
	size := 16
	for size*3/4 < hint && size < 1<<30 {
		size *= 2
	}
	x.cells = make([]uint64, size)
	x.n = 0
}

func cell(tag, slot uint32) uint64 { return uint64(tag)<<32 | uint64(slot+1) }

func (x *index) insert(tag, slot uint32) {
	if (x.n+1)*4 > len(x.cells)*3 {
		x.grow()
	}
	mask := uint32(len(x.cells) - 1)
	p := tag & mask
	for x.cells[p] != 0 {
		p = (p + 1) & mask
	}
	x.cells[p] = cell(tag, slot)
	x.n++
}

func (x *index) grow() {
	old := x.cells
	x.cells = make([]uint64, 2*len(old))
	mask := uint32(len(x.cells) - 1)
	for _, c := range old {
		if c == 0 {
			continue
		}
		p := uint32(c>>32) & mask
		for x.cells[p] != 0 {
			p = (p + 1) & mask
		}
		x.cells[p] = c
	}
}

// remove deletes the cell of (tag, slot), shifting later cells of the same
// probe run back so that lookups never stop early.
func (x *index) remove(tag, slot uint32) {
	mask := uint32(len(x.cells) - 1)
	want := cell(tag, slot)
	p := tag & mask
	for x.cells[p] != want {
		if x.cells[p] == 0 {
			return
		}
		p = (p + 1) & mask
	}
	x.cells[p] = 0
	x.n--
	for q := (p + 1) & mask; x.cells[q] != 0; q = (q + 1) & mask {
		home := uint32(x.cells[q]>>32) & mask
		// Move the cell at q into the hole at p unless its home lies
		// cyclically in (p, q]: then the hole does not break its run.
		if (q > p && (home <= p || home > q)) || (q < p && home <= p && home > q) {
			x.cells[p] = x.cells[q]
			x.cells[q] = 0
			p = q
		}
	}
}
