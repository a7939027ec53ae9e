package bucket

import (
	"encoding/binary"
	"unsafe"
)

// How an entry holds its key: up to inlineKey bytes in the entry itself,
// a longer key in its page's long-key buffer (longPage).

// longPage holds the keys longer than inlineKey of one page of entries,
// back to back in one buffer; an entry holding one keeps its offset and
// length in kb. A removed key's bytes stay where they are until the buffer
// is full: the next key then goes to a new buffer, with only the keys still
// held copied over. So a byte of a buffer is never written again once a key
// holds it, and key returns long keys as strings over the buffer, without
// copying them: a string kept after its key was removed, or its buffer
// replaced, still reads the key (and keeps that buffer alive).
type longPage struct {
	b []byte
	n int // keys held
}

// minLongBuffer is the least capacity of a page's first long-key buffer.
const minLongBuffer = 512

// longAt returns the offset and length, in its page's buffer, of the long
// key entry e holds.
func longAt(e *entry) (off, n uint32) {
	return binary.LittleEndian.Uint32(e.kb[0:4]), binary.LittleEndian.Uint32(e.kb[4:8])
}

// is reports whether slot i, whose entry is e, holds key.
func (sh *shard) is(e *entry, i uint32, key string) bool {
	if len(key) <= inlineKey {
		return int(e.klen) == len(key) && string(e.kb[:len(key)]) == key
	}
	if e.klen != longKey {
		return false
	}
	off, n := longAt(e)
	return int(n) == len(key) && string(sh.long[i>>pageBits].b[off:off+n]) == key
}

// longKey returns the long key of slot i, as a string over its page's
// buffer (see longPage).
func (sh *shard) longKey(i uint32) string {
	off, n := longAt(sh.at(i))
	return unsafe.String(&sh.long[i>>pageBits].b[off], n)
}

// key returns the key slot i holds; "" for a free slot.
func (sh *shard) key(i uint32) string {
	e := sh.at(i)
	if e.klen == longKey {
		return sh.longKey(i)
	}
	return string(e.kb[:e.klen])
}

// hash returns the seeded hash of the key slot i holds.
func (sh *shard) hash(i uint32) uint64 {
	e := sh.at(i)
	if e.klen == longKey {
		return sh.hasher.sum(sh.longKey(i))
	}
	return sh.hasher.sumBytes(e.kb[:e.klen])
}

// keyLen returns the length of the key slot i, whose entry is e, holds.
func (sh *shard) keyLen(e *entry, i uint32) int {
	if e.klen == longKey {
		_, n := longAt(e)
		return int(n)
	}
	return int(e.klen)
}

// setKey stores key in the free slot i, whose entry is e.
func (sh *shard) setKey(e *entry, i uint32, key string) {
	if len(key) <= inlineKey {
		e.klen = uint8(copy(e.kb[:], key))
		return
	}
	for int(i>>pageBits) >= len(sh.long) {
		sh.long = append(sh.long, longPage{})
	}
	p := &sh.long[i>>pageBits]
	if len(p.b)+len(key) > cap(p.b) {
		sh.renewLong(i>>pageBits, len(key))
	}
	off := len(p.b)
	p.b = append(p.b, key...)
	p.n++
	e.klen = longKey
	binary.LittleEndian.PutUint32(e.kb[0:4], uint32(off))
	binary.LittleEndian.PutUint32(e.kb[4:8], uint32(len(key)))
}

// renewLong gives page pg a new long-key buffer with room for more bytes
// after the keys it holds, which are copied over (the removed ones are
// not). The old buffer is left as it is, for the strings over it. The new
// one has room for as many keys again as the page has free slots, at most
// doubling, and at least a quarter more than it holds: a page filling up
// renews its buffer a few times, and one whose keys come and go renews it
// after a quarter of its bytes were replaced, not at every key.
func (sh *shard) renewLong(pg uint32, more int) {
	p := &sh.long[pg]
	live, long, held := more, 1, 1 // the key to come counts
	page := sh.pages[pg]
	for j := range page {
		switch e := &page[j]; e.klen {
		case 0:
		case longKey:
			_, n := longAt(e)
			live += int(n)
			long++
			held++
		default:
			held++
		}
	}
	room := min(live, live/long*max(pageSize-held, 0))
	b := make([]byte, 0, max(live+max(room, live/4), minLongBuffer))
	for j := range page {
		e := &page[j]
		if e.klen != longKey {
			continue
		}
		off, n := longAt(e)
		binary.LittleEndian.PutUint32(e.kb[0:4], uint32(len(b)))
		b = append(b, p.b[off:off+n]...)
	}
	p.b = b
}

// dropLong forgets the long key of slot i (its entry's klen is the
// caller's to clear): its bytes stay in the buffer until renewLong, and a
// page left with none lets its buffer go.
func (sh *shard) dropLong(i uint32) {
	p := &sh.long[i>>pageBits]
	if p.n--; p.n == 0 {
		p.b = nil
	}
}
