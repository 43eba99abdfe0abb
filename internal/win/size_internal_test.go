package win

import (
	"testing"
	"unsafe"
)

// The memory column of the guarantee table in doc.go: the size of each
// window's state, whatever N (plus, for the logs, 16 bytes per entry, and
// for SubWindowCounter 8 bytes per block). A change of layout that grows a
// window fails here, so the table is kept true.
func TestStateSizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"Completion", unsafe.Sizeof(Completion{}), 112},
		{"SlidingLog", unsafe.Sizeof(SlidingLog{}), 112},
		{"FixedWindow", unsafe.Sizeof(FixedWindow{}), 96},
		{"SlidingWindowCounter", unsafe.Sizeof(SlidingWindowCounter{}), 48},
		{"SubWindowCounter", unsafe.Sizeof(SubWindowCounter{}), 72},
		{"TokenBucket", unsafe.Sizeof(TokenBucket{}), 112},
		{"GCRA", unsafe.Sizeof(GCRA{}), 104},
		{"entry", unsafe.Sizeof(entry{}), 16},
	} {
		if c.got != c.want {
			t.Errorf("unsafe.Sizeof(%s{}) = %d, the table in doc.go says %d", c.name, c.got, c.want)
		}
	}
}
