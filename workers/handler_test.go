package workers

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"testing"
)

// The secret is HMAC-SHA256 of "id:token", hex, whatever the numbers: the
// admin API checks checkpoints against it.
func TestAttemptSecretIsHMACOfIDAndToken(t *testing.T) {
	key := []byte("deployment attempt key")
	for _, c := range [][2]int64{{1, 1}, {0, 0}, {42, 7}, {math.MaxInt64, math.MaxInt64}, {math.MinInt64, -1}} {
		m := hmac.New(sha256.New, key)
		fmt.Fprintf(m, "%d:%d", c[0], c[1])
		if got, want := AttemptSecret(key, c[0], c[1]), hex.EncodeToString(m.Sum(nil)); got != want {
			t.Errorf("AttemptSecret(%d, %d) = %s, want %s", c[0], c[1], got, want)
		}
	}
}

func BenchmarkAttemptSecret(b *testing.B) {
	key := []byte("deployment attempt key")
	b.ReportAllocs()
	for i := range b.N {
		AttemptSecret(key, int64(i), int64(i)+1_000_000)
	}
}
