// Package ids makes identifiers and secrets: IDs sort by creation time (48-bit milliseconds, then 80 random
// bits, in lowercase base32) behind a type prefix such as "prj_".
package ids

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"time"
)

var enc = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

var (
	mu   sync.Mutex
	last [16]byte
)

// New returns prefix + "_" + a 26-character time-ordered identifier, strictly increasing within a process.
func New(prefix string) string {
	mu.Lock()
	defer mu.Unlock()
	var b [16]byte
	ms := uint64(time.Now().UnixMilli())
	binary.BigEndian.PutUint64(b[0:8], ms<<16)
	rand.Read(b[6:])
	if string(b[:]) <= string(last[:]) { // same millisecond: keep order by incrementing the previous value
		b = last
		for i := 15; i >= 0; i-- {
			b[i]++
			if b[i] != 0 {
				break
			}
		}
	}
	last = b
	return prefix + "_" + enc.EncodeToString(b[:])
}

// Secret returns n random bytes encoded in lowercase base32.
func Secret(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return enc.EncodeToString(b)
}

// Hash is the hex SHA-256 of a secret, the only form in which secrets are stored.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}
