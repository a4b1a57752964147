package postgres

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// scramIterations is PostgreSQL's default (scram_iterations, 4096).
const scramIterations = 4096

// AdminSCRAMIterations is the iteration count of AdminRole's verifier. Key stretching (PBKDF2) makes
// guessing a chosen password from a stolen verifier slow; the admin password is random bytes that no
// person chooses, sees or types (the appliance generates and seals it), so stretching adds nothing to it,
// while every admin connection pays for it on the client's side: at 4096 iterations about 0.65 ms of the
// appliance's CPU, half of what a connection costs it (bench/README.md "Observability benchmarks").
const AdminSCRAMIterations = 16

// SCRAMVerifier computes the SCRAM-SHA-256 verifier PostgreSQL stores for password (RFC 5802 and 7677,
// as PostgreSQL's scram_build_secret does): sent as the PASSWORD of CREATE or ALTER ROLE, it is stored as
// is, so the password itself never reaches the server, its statistics or its logs. password must be
// ASCII (PostgreSQL would SASLprep other text first); the appliance's generated passwords are.
func SCRAMVerifier(password string) (string, error) {
	return scramVerifier(password, scramIterations)
}

// AdminVerifier is SCRAMVerifier with AdminSCRAMIterations, for AdminRole's generated password.
func AdminVerifier(password string) (string, error) {
	return scramVerifier(password, AdminSCRAMIterations)
}

func scramVerifier(password string, iterations int) (string, error) {
	for _, r := range password {
		if r > 0x7e || r < 0x20 {
			return "", fmt.Errorf("scram verifier: the password must be printable ASCII")
		}
	}
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return "", err
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	stored := sha256.Sum256(mac(salted, "Client Key"))
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iterations, b64(salt), b64(stored[:]), b64(mac(salted, "Server Key"))), nil
}

// SCRAMIterationsOf is the iteration count of a SCRAM-SHA-256 verifier as pg_authid keeps it
// ("SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>"); false for anything else.
func SCRAMIterationsOf(verifier string) (int, bool) {
	rest, ok := strings.CutPrefix(verifier, "SCRAM-SHA-256$")
	if !ok {
		return 0, false
	}
	n, _, ok := strings.Cut(rest, ":")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(n)
	return i, err == nil && i > 0
}
