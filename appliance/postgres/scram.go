package postgres

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
)

// scramIterations is PostgreSQL's default (scram_iterations, 4096).
const scramIterations = 4096

// SCRAMVerifier computes the SCRAM-SHA-256 verifier PostgreSQL stores for password (RFC 5802 and 7677,
// as PostgreSQL's scram_build_secret does): sent as the PASSWORD of CREATE or ALTER ROLE, it is stored as
// is, so the password itself never reaches the server, its statistics or its logs. password must be
// ASCII (PostgreSQL would SASLprep other text first); the appliance's generated passwords are.
func SCRAMVerifier(password string) (string, error) {
	for _, r := range password {
		if r > 0x7e || r < 0x20 {
			return "", fmt.Errorf("scram verifier: the password must be printable ASCII")
		}
	}
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, scramIterations, sha256.Size)
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
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", scramIterations, b64(salt), b64(stored[:]), b64(mac(salted, "Server Key"))), nil
}
