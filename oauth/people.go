package oauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
)

// People sign in with keys of their own (Options.People), beside the operator's API key.
// A grant made with a person's key carries the person's name and a fingerprint of the
// key, and holds only while the configuration still gives that person that key: a
// person removed from the configuration, or given a new key, loses every sign-in at
// once.

// MethodPersonKey is the Identity method of a person's key used as a bearer token.
const MethodPersonKey = "person_key"

// people indexes the keys of Options.People.
type people struct {
	byHash map[[32]byte]string // sha256 of a key -> the person
	prints map[string]string   // person -> KeyFingerprint of the key
}

func newPeople(apiKey string, keys map[string]string) (people, error) {
	p := people{byHash: map[[32]byte]string{}, prints: map[string]string{}}
	apiHash := sha256.Sum256([]byte(apiKey))
	for name, key := range keys {
		if name == "" || key == "" {
			return p, errors.New("oauth: a person needs a name and a key")
		}
		h := sha256.Sum256([]byte(key))
		if other, dup := p.byHash[h]; dup || h == apiHash {
			if !dup {
				other = "the API key"
			}
			return p, fmt.Errorf("oauth: person %s has the same key as %s", name, other)
		}
		p.byHash[h] = name
		p.prints[name] = KeyFingerprint(key)
	}
	return p, nil
}

// whoseKey tells whose key key is: the operator's API key (person ""), or a person's.
// The API key is compared in constant time; people's keys are looked up by their
// SHA-256, which says nothing about a key that is not there.
func (s *Server) whoseKey(key string) (person string, ok bool) {
	h := sha256.Sum256([]byte(key))
	if subtle.ConstantTimeCompare(h[:], s.keyHash[:]) == 1 {
		return "", true
	}
	person, ok = s.people.byHash[h]
	return person, ok
}

// personHolds reports whether a sign-in made by person with a key of fingerprint fp
// still holds: always for the operator, and while the person keeps that key.
func (s *Server) personHolds(person, fp string) bool {
	if person == "" {
		return true
	}
	want, ok := s.people.prints[person]
	return ok && subtle.ConstantTimeCompare([]byte(want), []byte(fp)) == 1
}

// keyPrint is the fingerprint grants of person record: "" for the operator.
func (s *Server) keyPrint(person string) string {
	if person == "" {
		return ""
	}
	return s.people.prints[person]
}
