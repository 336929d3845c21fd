package detector

import "iter"

// smallMapMax is how many entries a smallMap keeps in its slice before it
// moves them to a map.
const smallMapMax = 8

// smallMap is a map that keeps its first few entries in a slice. Most
// sessions hold a handful of calls, tool calls, progress tokens and streams:
// for so few, scanning a slice is as fast as hashing and costs far less
// memory and allocation than a map's table, and the detector keeps one of
// each per live session. The zero value is empty and ready to use.
type smallMap[K comparable, V any] struct {
	few  []smallEntry[K, V]
	many map[K]V // non-nil once the entries outgrew few; few is then nil
}

type smallEntry[K comparable, V any] struct {
	k K
	v V
}

func (m *smallMap[K, V]) get(k K) (V, bool) {
	if m.many != nil {
		v, ok := m.many[k]
		return v, ok
	}
	for i := range m.few {
		if m.few[i].k == k {
			return m.few[i].v, true
		}
	}
	var zero V
	return zero, false
}

// at is get without the flag: the zero value when k is absent.
func (m *smallMap[K, V]) at(k K) V {
	v, _ := m.get(k)
	return v
}

func (m *smallMap[K, V]) set(k K, v V) {
	if m.many != nil {
		m.many[k] = v
		return
	}
	for i := range m.few {
		if m.few[i].k == k {
			m.few[i].v = v
			return
		}
	}
	if len(m.few) < smallMapMax {
		if m.few == nil {
			m.few = make([]smallEntry[K, V], 0, smallMapMax)
		}
		m.few = append(m.few, smallEntry[K, V]{k, v})
		return
	}
	m.many = make(map[K]V, 2*smallMapMax)
	for _, e := range m.few {
		m.many[e.k] = e.v
	}
	m.many[k] = v
	m.few = nil
}

func (m *smallMap[K, V]) del(k K) {
	if m.many != nil {
		delete(m.many, k)
		return
	}
	for i := range m.few {
		if m.few[i].k == k {
			last := len(m.few) - 1
			m.few[i] = m.few[last]
			m.few[last] = smallEntry[K, V]{}
			m.few = m.few[:last]
			return
		}
	}
}

func (m *smallMap[K, V]) len() int {
	if m.many != nil {
		return len(m.many)
	}
	return len(m.few)
}

// all yields every entry in no particular order; callers that emit
// records sort what they collect.
func (m *smallMap[K, V]) all() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		if m.many != nil {
			for k, v := range m.many {
				if !yield(k, v) {
					return
				}
			}
			return
		}
		for _, e := range m.few {
			if !yield(e.k, e.v) {
				return
			}
		}
	}
}
