package appliance

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
)

// SecretBox encrypts secrets the appliance must use again (AES-256-GCM with a key file in the data dir).
type SecretBox struct {
	aead cipher.AEAD
	key  []byte
}

// OpenSecretBox loads the key at path, creating a new random key (mode 0600) on first use.
func OpenSecretBox(path string) (*SecretBox, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		key = make([]byte, 32)
		rand.Read(key)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("create secret key: %w", err)
		}
		if _, err := f.Write(key); err != nil {
			f.Close()
			return nil, fmt.Errorf("write secret key: %w", err)
		}
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("write secret key: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("read secret key: %w", err)
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("secret key %s: want 32 bytes, have %d", path, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &SecretBox{aead: aead, key: key}, nil
}

// Seal encrypts plaintext; the nonce is prepended.
func (b *SecretBox) Seal(plaintext []byte) []byte {
	nonce := make([]byte, b.aead.NonceSize())
	rand.Read(nonce)
	return b.aead.Seal(nonce, nonce, plaintext, nil)
}

// Open decrypts what Seal produced.
func (b *SecretBox) Open(sealed []byte) ([]byte, error) {
	n := b.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("sealed value too short")
	}
	return b.aead.Open(nil, sealed[:n], sealed[n:], nil)
}

// MAC is HMAC-SHA256 of msg under a key derived from the secret key for purpose (so that signatures of
// different purposes never verify for one another, and the secret key itself never signs anything).
func (b *SecretBox) MAC(purpose string, msg []byte) []byte {
	kdf := hmac.New(sha256.New, b.key)
	kdf.Write([]byte("appliance mac key: " + purpose))
	m := hmac.New(sha256.New, kdf.Sum(nil))
	m.Write(msg)
	return m.Sum(nil)
}

// DeriveKey is a 32-byte key derived from the secret key with HKDF-SHA256 for info (a fixed string naming
// its use): the same secret key and info give the same key, another info an unrelated one, and the key
// tells nothing of the secret key.
func (b *SecretBox) DeriveKey(info string) ([]byte, error) {
	return hkdf.Key(sha256.New, b.key, nil, info, 32)
}
