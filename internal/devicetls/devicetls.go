// Package devicetls owns the device-facing TLS key pair: the certificate
// ztpd's device HTTPS listener presents, the SHA-256 pins of it that the
// documents devices fetch in clear carry, and its rotation.
//
// By default the key pair is generated once (ECDSA P-256) and kept in the
// store, its private key sealed with the at-rest keyring, so every
// appliance of a group sharing the store presents the same certificate: a
// document one appliance served names a pin the others' listeners match.
// With an operator's certificate files, those are served and pinned, and
// rotating means replacing the files.
//
// A rotation is a schedule computed from what is stored, never a step an
// appliance must take: `rotate` stores the next pair; from then documents
// name both pins; Grace after the rotation the listeners serve the next
// pair, and documents name the old pin too until Grace after that switch.
// Every appliance reads the same record and the same clock rule, so they
// switch together without talking to each other.
package devicetls

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
	"github.com/ztpd/ztpd/internal/secretbox"
)

// Owner is the store's secrets owner of the device-facing key pairs.
const Owner = "appliance/device-tls"

// DefaultGrace is how long documents name both pins before the listeners
// switch to the next pair, and name the old one after. A device fetches
// its document and then its secrets within one ZTP run (minutes), but a
// switch or VM that fetched its document just before a rotation may sit
// in a reboot, an ONIE install or an image download for hours before it
// uses the pin; a day covers that with room, and an operator rotating
// because a key leaked sets a shorter one.
const DefaultGrace = 24 * time.Hour

// refreshEvery is how often Run re-reads the stored record: another
// appliance of the group may have rotated. Against a grace of hours, half
// a minute of lag is nothing.
const refreshEvery = 30 * time.Second

// ErrRotating refuses a rotation while one is under way.
var ErrRotating = errors.New("a rotation of the device TLS key pair is under way")

// ErrOperatorCertificate refuses a rotation of an operator's certificate.
var ErrOperatorCertificate = errors.New("the device TLS certificate is the operator's (http.tls.cert_file): replace the files and reload ztpd (systemctl reload ztpd, SIGHUP) to rotate it")

// Options configure the service.
type Options struct {
	Store core.Store
	Keys  *secretbox.Keyring
	// CertFile and KeyFile are the operator's certificate; empty: the
	// stored, generated pair.
	CertFile, KeyFile string
	// Grace is the overlap of a rotation (DefaultGrace when 0).
	Grace time.Duration
	// Names are the addresses and host names a generated certificate
	// names. Devices check the pin, not the names; they are for people
	// and tools that look.
	Names      []string
	Now        func() time.Time
	Log        *slog.Logger
	Registerer prometheus.Registerer
}

// Phase is where a rotation stands.
type Phase string

const (
	// PhaseSteady: one pair, one pin.
	PhaseSteady Phase = "steady"
	// PhaseNext: the next pair exists; the listeners still serve the
	// current one; documents name both.
	PhaseNext Phase = "next"
	// PhaseSwitched: the listeners serve the new pair; documents still
	// name the old pin until the grace after the switch ends.
	PhaseSwitched Phase = "switched"
)

// Status is the device TLS key pair as an operator sees it.
type Status struct {
	// Source is "store" (generated, shared by the group) or "files".
	Source string `json:"source"`
	Phase  Phase  `json:"phase"`
	// Serving is the pin of the certificate the listeners present.
	Serving string `json:"serving_pin"`
	// Pins are what documents name now, the serving one first.
	Pins []string `json:"pins"`
	// Created is when the serving pair was made.
	Created time.Time `json:"created"`
	// SwitchAt is when the listeners move to the next pair (PhaseNext);
	// OldPinUntil is when documents stop naming the old pin
	// (PhaseSwitched).
	SwitchAt    time.Time `json:"switch_at,omitzero"`
	OldPinUntil time.Time `json:"old_pin_until,omitzero"`
	Grace       string    `json:"grace"`
}

// record is the stored document: the pair in use and, after a rotation,
// the next one. Certificates are public; the keys are sealed.
type record struct {
	Current pairDoc  `json:"current"`
	Next    *pairDoc `json:"next,omitempty"`
	// Previous is the pair served before the last switch, kept so its pin
	// can be named until the grace after the switch ends.
	Previous *pairDoc `json:"previous,omitempty"`
}

type pairDoc struct {
	CertPEM string    `json:"cert"`
	Key     []byte    `json:"key"` // sealed (aad: Owner + "/" + pin)
	Created time.Time `json:"created"`
	// Switched is when this pair started being served (zero for the
	// first pair, served from its creation).
	Switched time.Time `json:"switched,omitzero"`
}

// pair is a decoded key pair.
type pair struct {
	cert    tls.Certificate
	pin     string
	created time.Time
}

// Service is the device-facing TLS key pair of this appliance.
type Service struct {
	opt Options

	mu       sync.Mutex
	files    *pair   // the operator's, when configured
	rec      *record // the stored record as last read
	decoded  map[string]*pair
	lastSeen Phase

	pinAge *prometheus.GaugeVec
	phase  *prometheus.GaugeVec
}

// New builds the service; Load reads or creates the key pair.
func New(opt Options) (*Service, error) {
	if opt.CertFile == "" && (opt.Store == nil || opt.Keys == nil) {
		return nil, errors.New("devicetls: a store and a keyring are required without certificate files")
	}
	if opt.Grace <= 0 {
		opt.Grace = DefaultGrace
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	s := &Service{opt: opt, decoded: map[string]*pair{}}
	f := promauto.With(opt.Registerer)
	s.pinAge = f.NewGaugeVec(prometheus.GaugeOpts{Name: "ztpd_device_tls_pin_age_seconds",
		Help: "Age of the device-facing TLS key pair the listener serves."}, nil)
	s.phase = f.NewGaugeVec(prometheus.GaugeOpts{Name: "ztpd_device_tls_rotation_phase",
		Help: "Rotation of the device-facing TLS key pair: 1 for the phase it is in (steady, next, switched)."}, []string{"phase"})
	return s, nil
}

// Load reads the operator's files, or the stored pair, creating and
// storing one when the store holds none. Appliances of a group starting
// together each try; the store's transaction lets one record win and the
// others read it.
func (s *Service) Load() error {
	if s.opt.CertFile != "" {
		p, err := s.readFiles()
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.files = p
		s.mu.Unlock()
		// Debug: every offline command loads it too; serve's start line
		// names the pins.
		s.opt.Log.Debug("device TLS uses the operator's certificate", "cert", s.opt.CertFile, "pin", p.pin)
		s.observe()
		return nil
	}
	var rec record
	var found bool
	err := s.opt.Store.View(func(tx core.Tx) error {
		var err error
		rec, found, err = readRecord(tx)
		return err
	})
	if err != nil {
		return fmt.Errorf("device TLS key pair: %w", err)
	}
	if found {
		return s.loaded(rec, false)
	}
	var created bool
	// None stored: make one, unless another appliance stores its own first.
	fresh, err := s.newPairDoc(s.opt.Now())
	if err != nil {
		return err
	}
	err = s.opt.Store.Batch(func(tx core.Tx) error {
		got, ok, err := readRecord(tx)
		if err != nil {
			return err
		}
		rec, created = got, !ok
		if ok {
			return nil
		}
		rec = record{Current: fresh}
		return writeRecord(tx, rec)
	})
	if err != nil {
		return fmt.Errorf("device TLS key pair: %w", err)
	}
	return s.loaded(rec, created)
}

// readFiles reads the operator's certificate and key.
func (s *Service) readFiles() (*pair, error) {
	cert, err := tls.LoadX509KeyPair(s.opt.CertFile, s.opt.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("http.tls: %w", err)
	}
	pin, err := pinOf(&cert)
	if err != nil {
		return nil, fmt.Errorf("http.tls: %w", err)
	}
	created := s.opt.Now()
	if leaf, err := x509.ParseCertificate(cert.Certificate[0]); err == nil {
		created = leaf.NotBefore
	}
	return &pair{cert: cert, pin: pin, created: created}, nil
}

// ReloadFiles reads the operator's certificate files again (SIGHUP): a
// valid pair is served to every new connection and its pin named by every
// document from now on; files that do not load are refused and the pair
// in use stays. There is no overlap: the listener has only the new key,
// so naming the old pin would help no device. A device holding a document
// fetched just before stops at the pin check and its next ZTP run gets the
// new pin. Without certificate files it does nothing (changed is false).
func (s *Service) ReloadFiles() (changed bool, err error) {
	if s.opt.CertFile == "" {
		return false, nil
	}
	p, err := s.readFiles()
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	old := s.files
	s.files = p
	s.mu.Unlock()
	if old != nil && old.pin == p.pin {
		s.opt.Log.Info("device TLS certificate files read again; same key", "cert", s.opt.CertFile, "pin", p.pin)
	} else {
		s.opt.Log.Info("device TLS certificate files reloaded: the listener serves the new key and documents name its pin",
			"cert", s.opt.CertFile, "pin", p.pin)
	}
	s.observe()
	return true, nil
}

// loaded adopts the record Load read or created and says so.
func (s *Service) loaded(rec record, created bool) error {
	if err := s.adopt(rec); err != nil {
		return err
	}
	st := s.Status()
	if created {
		s.opt.Log.Info("device TLS key pair created; documents pin it", "pin", st.Serving)
	} else {
		s.opt.Log.Debug("device TLS key pair loaded", "pin", st.Serving, "phase", st.Phase)
	}
	s.observe()
	return nil
}

// Run re-reads the stored record every refreshEvery (a rotation made on
// another appliance) and logs the switch when its time comes, until ctx
// ends.
func (s *Service) Run(ctx context.Context) error {
	t := time.NewTicker(refreshEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := s.Refresh(); err != nil {
				s.opt.Log.Warn("device TLS key pair not re-read; serving the one read before", "err", err)
			}
		}
	}
}

// Name names the service as a runner.
func (s *Service) Name() string { return "device-tls" }

// Refresh reads the stored record again (no-op with the operator's files).
func (s *Service) Refresh() error {
	if s.opt.CertFile != "" {
		s.observe()
		return nil
	}
	var rec record
	var ok bool
	err := s.opt.Store.View(func(tx core.Tx) error {
		var err error
		rec, ok, err = readRecord(tx)
		return err
	})
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("the stored device TLS key pair is gone")
	}
	if err := s.adopt(rec); err != nil {
		return err
	}
	s.observe()
	return nil
}

// Rotate stores the next key pair: documents name both pins from now on,
// and the listeners switch to it after the grace. A rotation under way
// (its switch not reached) is refused; one whose switch passed is
// completed first (its old pin is then no longer named).
func (s *Service) Rotate() (Status, error) {
	if s.opt.CertFile != "" {
		return Status{}, core.WrapError(core.KindState, ErrOperatorCertificate.Error(), ErrOperatorCertificate)
	}
	now := s.opt.Now()
	fresh, err := s.newPairDoc(now)
	if err != nil {
		return Status{}, err
	}
	var rec record
	err = s.opt.Store.Batch(func(tx core.Tx) error {
		got, ok, err := readRecord(tx)
		if err != nil {
			return err
		}
		if !ok {
			return core.Errorf(core.KindState, "no device TLS key pair stored yet (it is made when ztpd serves with http.tls enabled)")
		}
		got = settle(got, now, s.opt.Grace)
		if got.Next != nil {
			return core.WrapError(core.KindState, fmt.Sprintf("%s: the listeners switch to the next pair at %s; rotate again after that", ErrRotating,
				got.Next.Created.Add(s.opt.Grace).UTC().Format(time.RFC3339)), ErrRotating)
		}
		got.Previous = nil
		next := fresh
		got.Next = &next
		rec = got
		return writeRecord(tx, rec)
	})
	if err != nil {
		return Status{}, err
	}
	if err := s.adopt(rec); err != nil {
		return Status{}, err
	}
	st := s.Status()
	s.opt.Log.Info("device TLS rotation started: documents name both pins; the listeners switch at the end of the grace",
		"serving", st.Serving, "pins", strings.Join(st.Pins, ","), "switch_at", st.SwitchAt.UTC().Format(time.RFC3339))
	s.observe()
	return st, nil
}

// settle applies a switch whose time has come to rec: the next pair
// becomes the current one, the current one the previous, and a previous
// pair whose grace ended is dropped. It is what every reader of the
// record computes; Rotate stores it.
func settle(rec record, now time.Time, grace time.Duration) record {
	if rec.Next != nil {
		at := rec.Next.Created.Add(grace)
		if !now.Before(at) {
			prev := rec.Current
			rec.Current = *rec.Next
			rec.Current.Switched = at
			rec.Previous, rec.Next = &prev, nil
		}
	}
	if rec.Previous != nil && !now.Before(rec.Current.Switched.Add(grace)) {
		rec.Previous = nil
	}
	return rec
}

// adopt decodes every pair rec names and makes rec the one served.
func (s *Service) adopt(rec record) error {
	decoded := map[string]*pair{}
	for _, d := range []*pairDoc{&rec.Current, rec.Next, rec.Previous} {
		if d == nil {
			continue
		}
		s.mu.Lock()
		p := s.decoded[d.CertPEM]
		s.mu.Unlock()
		if p == nil {
			var err error
			if p, err = s.decode(*d); err != nil {
				return err
			}
		}
		decoded[d.CertPEM] = p
	}
	s.mu.Lock()
	s.rec, s.decoded = &rec, decoded
	s.mu.Unlock()
	return nil
}

// view is the record as it stands at now, and its decoded pairs.
func (s *Service) view(now time.Time) (serving *pair, others []*pair, st Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st.Grace = s.opt.Grace.String()
	if s.files != nil {
		st.Source, st.Phase, st.Serving, st.Pins, st.Created = "files", PhaseSteady, s.files.pin, []string{s.files.pin}, s.files.created
		return s.files, nil, st
	}
	if s.rec == nil {
		return nil, nil, st
	}
	rec := settle(*s.rec, now, s.opt.Grace)
	serving = s.decoded[rec.Current.CertPEM]
	st.Source, st.Phase, st.Serving, st.Created = "store", PhaseSteady, serving.pin, serving.created
	st.Pins = []string{serving.pin}
	switch {
	case rec.Next != nil:
		n := s.decoded[rec.Next.CertPEM]
		others = append(others, n)
		st.Phase, st.SwitchAt = PhaseNext, rec.Next.Created.Add(s.opt.Grace)
		st.Pins = append(st.Pins, n.pin)
	case rec.Previous != nil:
		p := s.decoded[rec.Previous.CertPEM]
		others = append(others, p)
		st.Phase, st.OldPinUntil = PhaseSwitched, rec.Current.Switched.Add(s.opt.Grace)
		st.Pins = append(st.Pins, p.pin)
	}
	return serving, others, st
}

// Status is the key pair and its rotation now.
func (s *Service) Status() Status {
	_, _, st := s.view(s.opt.Now())
	return st
}

// Pins are the pins documents name now, the serving one first.
func (s *Service) Pins() []string { return s.Status().Pins }

// PinList is Pins as curl's --pinnedpubkey takes them: "sha256//A;sha256//B".
func (s *Service) PinList() string { return strings.Join(s.Pins(), ";") }

// GetCertificate is the listener's tls.Config.GetCertificate: the pair
// the schedule serves now.
func (s *Service) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	p, _, _ := s.view(s.opt.Now())
	if p == nil {
		return nil, errors.New("device TLS key pair not loaded")
	}
	return &p.cert, nil
}

// TLSConfig is the device listener's TLS configuration.
func (s *Service) TLSConfig() *tls.Config {
	return &tls.Config{GetCertificate: s.GetCertificate, MinVersion: tls.VersionTLS12}
}

// observe sets the metrics and logs a phase change (a switch seen).
func (s *Service) observe() {
	now := s.opt.Now()
	p, _, st := s.view(now)
	if p == nil {
		return
	}
	s.pinAge.WithLabelValues().Set(now.Sub(st.Created).Seconds())
	for _, ph := range []Phase{PhaseSteady, PhaseNext, PhaseSwitched} {
		v := 0.0
		if ph == st.Phase {
			v = 1
		}
		s.phase.WithLabelValues(string(ph)).Set(v)
	}
	s.mu.Lock()
	prev := s.lastSeen
	s.lastSeen = st.Phase
	s.mu.Unlock()
	if prev == "" || prev == st.Phase {
		return
	}
	switch st.Phase {
	case PhaseSwitched:
		s.opt.Log.Info("device TLS listeners switched to the next key pair; documents name the old pin until the grace ends",
			"serving", st.Serving, "old_pin_until", st.OldPinUntil.UTC().Format(time.RFC3339))
	case PhaseSteady:
		s.opt.Log.Info("device TLS rotation done: documents name one pin", "pin", st.Serving)
	}
}

// newPairDoc generates a key pair and its self-signed certificate, the
// key sealed.
func (s *Service) newPairDoc(now time.Time) (pairDoc, error) {
	// Devices check the pin, not the dates (curl --pinnedpubkey with -k,
	// python's ssl with the pin checked): the pair lasts until it is
	// rotated, so the certificate does not end before that.
	der, kder, err := httpserve.NewSelfSigned("ztpd device TLS", s.opt.Names, now, now.AddDate(20, 0, 0))
	if err != nil {
		return pairDoc{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return pairDoc{}, err
	}
	pin := PinOf(leaf)
	sealed, err := s.opt.Keys.Seal(kder, []byte(Owner+"/"+pin))
	if err != nil {
		return pairDoc{}, err
	}
	return pairDoc{CertPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), Key: sealed, Created: now.UTC()}, nil
}

// decode opens a stored pair.
func (s *Service) decode(d pairDoc) (*pair, error) {
	b, _ := pem.Decode([]byte(d.CertPEM))
	if b == nil {
		return nil, errors.New("device TLS: stored certificate is not PEM")
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("device TLS: stored certificate: %w", err)
	}
	pin := PinOf(leaf)
	kder, err := s.opt.Keys.Open(d.Key, []byte(Owner+"/"+pin))
	if err != nil {
		return nil, fmt.Errorf("device TLS: stored key: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kder)
	if err != nil {
		return nil, fmt.Errorf("device TLS: stored key: %w", err)
	}
	return &pair{cert: tls.Certificate{Certificate: [][]byte{b.Bytes}, PrivateKey: key, Leaf: leaf}, pin: pin, created: d.Created}, nil
}

func readRecord(tx core.Tx) (record, bool, error) {
	raw, ok, err := tx.Secrets().Get(Owner)
	if err != nil || !ok {
		return record{}, false, err
	}
	var rec record
	if err := json.Unmarshal(raw, &rec); err != nil {
		return record{}, false, fmt.Errorf("device TLS record: %w", err)
	}
	return rec, true, nil
}

func writeRecord(tx core.Tx, rec record) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return tx.Secrets().Put(Owner, raw)
}

// PinOf is the pin of a certificate as curl's --pinnedpubkey takes it:
// "sha256//" and the base64 of the SHA-256 of its SubjectPublicKeyInfo.
func PinOf(c *x509.Certificate) string {
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return "sha256//" + base64.StdEncoding.EncodeToString(sum[:])
}

func pinOf(c *tls.Certificate) (string, error) {
	if len(c.Certificate) == 0 {
		return "", errors.New("no certificate")
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return "", err
	}
	return PinOf(leaf), nil
}
