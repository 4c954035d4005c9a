package record

import "testing"

var zzVals = []int64{1763769601532, 1841, 1, 200, 4194624, 4194304, 41250, 3125, 87, 14600, 912}

func BenchmarkZZAppendInt(b *testing.B) {
	buf := make([]byte, 0, 1024)
	for i := 0; i < b.N; i++ {
		buf = buf[:0]
		for _, v := range zzVals {
			buf = appendInt(buf, v)
		}
	}
}
