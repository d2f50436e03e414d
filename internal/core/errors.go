package core

import (
	"errors"
	"fmt"
	"time"
)

// ErrorKind classifies domain errors so that every front end (REST,
// CloudStack API, CLI, device endpoints) maps them the same way.
type ErrorKind int

const (
	KindInternal    ErrorKind = iota // a bug or a storage failure
	KindInvalid                      // bad parameter value
	KindNotFound                     // no such cluster, version, job or device
	KindState                        // not allowed in the current state
	KindInUse                        // still referenced (a version used by clusters)
	KindPermission                   // the caller's role may not do this
	KindUnavailable                  // a needed part is absent (no CA provisioned)
	KindConflict                     // a name already taken
	KindRefused                      // a device asked for what it is not entitled to
	KindTooLarge                     // a request body or value over its limit
	KindAuth                         // no or bad credentials
	KindWaiting                      // not ready yet for this caller: ask again later (a device waiting for its cluster, approval, an image)
)

var kindNames = [...]string{"internal", "invalid", "not_found", "state", "in_use", "forbidden",
	"unavailable", "conflict", "refused", "too_large", "unauthorized", "waiting"}

// String is the kind's stable name, as error bodies carry it.
func (k ErrorKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Error is a classified domain error with a message meant for the user.
type Error struct {
	Kind ErrorKind
	Msg  string
	Err  error
	// RetryAfter, for KindWaiting, is when to ask again; 0 leaves it to
	// the answering door.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Err != nil && e.Msg == "" {
		return e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns a classified error with a formatted message.
func Errorf(k ErrorKind, format string, args ...any) error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// WrapError classifies err under k, keeping it for errors.Is/As.
func WrapError(k ErrorKind, msg string, err error) error {
	return &Error{Kind: k, Msg: msg, Err: err}
}

// Waiting is a KindWaiting error: reason says what the caller waits for,
// in words it may read (it is answered as is, never hidden as internal).
func Waiting(reason string, retryAfter time.Duration) error {
	return &Error{Kind: KindWaiting, Msg: reason, RetryAfter: retryAfter}
}

// KindOf classifies err: a classified error's kind, ErrNotFound as not
// found, anything else internal.
func KindOf(err error) ErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	if errors.Is(err, ErrNotFound) {
		return KindNotFound
	}
	return KindInternal
}

// CorruptError reports stored records that could not be decoded. A listing
// that meets one visits every readable record first and returns it at the
// end, so a reader that can do without the bad ones (DHCP loading leases)
// loses nothing else, and every other reader gets a clear error.
type CorruptError struct {
	Collection string
	Keys       []string // at most the first 16
	Count      int
	Err        error // the first decode error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%d corrupt %s record(s) (first %q): %v", e.Count, e.Collection, e.Keys, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }
