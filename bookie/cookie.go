package bookie

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/internal/faultfs"
	"github.com/meridianmq/meridian/metadata"
	"github.com/prometheus/client_golang/prometheus"
)

// A cookie is a bookie's identity on disk and in the regional metadata
// (BookKeeper's cookies). It is created once, when a bookie first starts on
// empty directories or when it is re-formatted, and checked at every start:
// a bookie whose directories were wiped, swapped or moved, or whose
// metadata cookie names another instance, refuses to serve. A wiped bookie
// that answered "no such entry" for entries it used to hold would let
// ledger recovery truncate acknowledged entries.
const (
	// CookieFileName is the cookie's file in every data directory
	// (JournalDir and LedgerDir).
	CookieFileName = "COOKIE"
	// CookieKeyPrefix prefixes the metadata cookie key CookieKeyPrefix+ID,
	// a persistent key in the region's shard changed only by
	// compare-and-set. It is not under topology.BookieRegistryPrefix
	// ("bookies/"), so registry listings never see it.
	CookieKeyPrefix = "bookie-cookies/"
	// cookieVersion is the layout version of Cookie.
	cookieVersion = 1
)

// Cookie is a bookie's identity: its ID, the instance UUID of the current
// format, and the directory layout it was formatted for. The same cookie is
// stored in every data directory and under CookieKeyPrefix+ID.
type Cookie struct {
	// Version is the cookie layout version (1).
	Version int `json:"version"`
	// BookieID is the bookie's configured ID.
	BookieID string `json:"bookie_id"`
	// InstanceID is a random UUID, new at every format.
	InstanceID string `json:"instance_id"`
	// JournalDir and LedgerDir are the absolute directories formatted.
	JournalDir string `json:"journal_dir"`
	LedgerDir  string `json:"ledger_dir"`
	// CreatedUnixMs is when this instance was formatted.
	CreatedUnixMs int64 `json:"created_unix_ms"`
	// LimboBelowLedger, when > 0, says the instance was made by a forced
	// re-format: ledgers with an ID below it may have had entries on the
	// previous instance, so the bookie answers "ledger unknown" instead of
	// "not found" for them until autorecovery has moved every one of them
	// off this bookie (see limbo.go). Not part of the identity: a cookie
	// whose limbo ended in metadata but not yet in a directory still
	// matches.
	LimboBelowLedger int64 `json:"limbo_below_ledger,omitempty"`
	// LimboDecommissioned records that the format decommissioned the
	// bookie in autorecovery (so that its old ledgers are re-replicated);
	// the end of limbo withdraws it.
	LimboDecommissioned bool `json:"limbo_decommissioned,omitempty"`
}

// sameIdentity reports whether two cookies name the same bookie instance
// and directory layout (limbo state aside).
func (c Cookie) sameIdentity(o Cookie) bool {
	return c.BookieID == o.BookieID && c.InstanceID == o.InstanceID && c.JournalDir == o.JournalDir && c.LedgerDir == o.LedgerDir
}

func (c Cookie) String() string {
	return fmt.Sprintf("bookie %s instance %s (journal_dir %s, ledger_dir %s)", c.BookieID, c.InstanceID, c.JournalDir, c.LedgerDir)
}

// CookieKey returns the metadata cookie key of bookie id.
func CookieKey(id string) string { return CookieKeyPrefix + id }

// ErrCookie is returned (wrapped, naming the directory or key and the fix)
// when a bookie's cookies are missing or do not match: the bookie refuses
// to start.
var ErrCookie = errors.New("bookie: cookie check failed")

// formatHint is the fix named by every cookie error.
const formatHint = "if the data is really gone, run `meridian bookie format --force --config FILE` to join as a new instance (its old ledgers are then re-replicated by autorecovery); otherwise restore the directory"

// newInstanceID returns a random RFC 4122 version 4 UUID.
func newInstanceID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// dataDirs returns the absolute journal and ledger directories of cfg.
func dataDirs(cfg Config) (journal, ledgers string, err error) {
	journal, err = filepath.Abs(cfg.JournalDir)
	if err != nil {
		return "", "", fmt.Errorf("bookie: journal_dir %s: %w", cfg.JournalDir, err)
	}
	ledgers = cfg.LedgerDir
	if ledgers == "" {
		ledgers = filepath.Join(cfg.JournalDir, "index")
	}
	if ledgers, err = filepath.Abs(ledgers); err != nil {
		return "", "", fmt.Errorf("bookie: ledger_dir %s: %w", cfg.LedgerDir, err)
	}
	return journal, ledgers, nil
}

// cookieDirs lists the distinct data directories that hold a cookie.
func cookieDirs(journal, ledgers string) []string {
	if journal == ledgers {
		return []string{journal}
	}
	return []string{journal, ledgers}
}

// readDirCookie reads dir's cookie; ok is false when there is none.
func readDirCookie(fsys faultfs.FS, dir string) (c Cookie, ok bool, err error) {
	p := filepath.Join(dir, CookieFileName)
	st, err := fsys.Stat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return c, false, nil
		}
		return c, false, fmt.Errorf("%w: stat %s: %v", ErrIO, p, err)
	}
	f, err := fsys.Open(p)
	if err != nil {
		return c, false, fmt.Errorf("%w: open %s: %v", ErrIO, p, err)
	}
	defer f.Close()
	buf := make([]byte, st.Size())
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return c, false, fmt.Errorf("%w: read %s: %v", ErrIO, p, err)
	}
	if err := json.Unmarshal(buf, &c); err != nil || c.Version != cookieVersion || c.InstanceID == "" {
		return c, false, fmt.Errorf("%w: %s is damaged (%v); %s", ErrCookie, p, err, formatHint)
	}
	return c, true, nil
}

// writeDirCookie durably replaces dir's cookie (tmp file, fsync, rename,
// directory fsync).
func writeDirCookie(fsys faultfs.FS, dir string, c Cookie) error {
	if err := fsys.MkdirAll(dir); err != nil {
		return fmt.Errorf("%w: mkdir %s: %v", ErrIO, dir, err)
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	p := filepath.Join(dir, CookieFileName)
	tmp := p + ".tmp"
	f, err := fsys.Create(tmp)
	if err != nil {
		return fmt.Errorf("%w: create %s: %v", ErrIO, tmp, err)
	}
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, p)
	}
	if err == nil {
		err = fsys.SyncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("%w: write %s: %v", ErrIO, p, err)
	}
	return nil
}

// hasData reports whether the directories hold journal files or a
// checkpoint (anything but a cookie).
func hasData(fsys faultfs.FS, journal, ledgers string) (bool, error) {
	names, err := fsys.ReadDir(journal)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("%w: list %s: %v", ErrIO, journal, err)
	}
	for _, n := range names {
		if _, ok := parseJournalFileName(n); ok {
			return true, nil
		}
	}
	if _, err := fsys.Stat(filepath.Join(ledgers, ckptName)); err == nil {
		return true, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("%w: stat %s: %v", ErrIO, filepath.Join(ledgers, ckptName), err)
	}
	return false, nil
}

// metaCookie reads the metadata cookie; ok is false when there is none.
// Transient errors are retried until ctx ends: the bookie cannot decide
// whether it may serve without it.
func metaCookie(ctx context.Context, store metadata.Store, id string) (c Cookie, version int64, ok bool, err error) {
	for {
		kv, err := store.Get(ctx, CookieKey(id), metadata.ReadOptions{})
		if err == nil {
			if err := json.Unmarshal(kv.Value, &c); err != nil {
				return c, 0, false, fmt.Errorf("%w: metadata key %s is damaged: %v", ErrCookie, CookieKey(id), err)
			}
			return c, kv.Version, true, nil
		}
		if errors.Is(err, metadata.ErrNotFound) {
			return c, 0, false, nil
		}
		select {
		case <-ctx.Done():
			return c, 0, false, fmt.Errorf("bookie: read metadata cookie %s: %w", CookieKey(id), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// putMetaCookie writes the metadata cookie guarded by version
// (metadata.MustNotExist for a new key).
func putMetaCookie(ctx context.Context, store metadata.Store, c Cookie, version int64) error {
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if _, err := store.Put(ctx, CookieKey(c.BookieID), data, version, 0); err != nil {
		return fmt.Errorf("bookie: write metadata cookie %s: %w", CookieKey(c.BookieID), err)
	}
	return nil
}

// checkCookies verifies (or, for a brand-new bookie, creates) the cookies
// of every data directory and the metadata cookie, and returns the cookie
// the bookie serves as. Any disagreement is an ErrCookie naming the
// directory or key and the fix; nothing is changed then.
func checkCookies(ctx context.Context, cfg Config, fsys faultfs.FS, log *slog.Logger) (Cookie, error) {
	journal, ledgers, err := dataDirs(cfg)
	if err != nil {
		return Cookie{}, err
	}
	dirs := cookieDirs(journal, ledgers)
	var (
		found   *Cookie
		foundIn string
		missing []string
	)
	for _, d := range dirs {
		c, ok, err := readDirCookie(fsys, d)
		if err != nil {
			return Cookie{}, err
		}
		if !ok {
			missing = append(missing, d)
			continue
		}
		switch {
		case c.BookieID != cfg.ID:
			return Cookie{}, fmt.Errorf("%w: %s belongs to bookie %q, this bookie is %q: wrong directory or wrong id in the config", ErrCookie, filepath.Join(d, CookieFileName), c.BookieID, cfg.ID)
		case c.JournalDir != journal || c.LedgerDir != ledgers:
			return Cookie{}, fmt.Errorf("%w: %s was formatted for journal_dir %s and ledger_dir %s, the config says %s and %s: fix the config or move the directories back",
				ErrCookie, filepath.Join(d, CookieFileName), c.JournalDir, c.LedgerDir, journal, ledgers)
		case found != nil && !found.sameIdentity(c):
			return Cookie{}, fmt.Errorf("%w: %s says instance %s but %s says instance %s: the directories come from different formats; %s",
				ErrCookie, filepath.Join(foundIn, CookieFileName), found.InstanceID, filepath.Join(d, CookieFileName), c.InstanceID, formatHint)
		}
		if found == nil {
			c := c
			found, foundIn = &c, d
		} else {
			found.LimboBelowLedger = max(found.LimboBelowLedger, c.LimboBelowLedger)
			found.LimboDecommissioned = found.LimboDecommissioned || c.LimboDecommissioned
		}
	}
	if found != nil && len(missing) > 0 {
		return Cookie{}, fmt.Errorf("%w: %s has no cookie while %s is %s: the directory was wiped or replaced; %s",
			ErrCookie, missing[0], filepath.Join(foundIn, CookieFileName), found, formatHint)
	}
	var (
		meta      Cookie
		metaFound bool
	)
	if cfg.Metadata != nil {
		if meta, _, metaFound, err = metaCookie(ctx, cfg.Metadata, cfg.ID); err != nil {
			return Cookie{}, err
		}
	}
	if found == nil {
		// No cookie anywhere on disk.
		data, err := hasData(fsys, journal, ledgers)
		if err != nil {
			return Cookie{}, err
		}
		if metaFound {
			if data {
				return Cookie{}, fmt.Errorf("%w: %s has data but no cookie while metadata key %s says %s: %s",
					ErrCookie, journal, CookieKey(cfg.ID), meta, formatHint)
			}
			return Cookie{}, fmt.Errorf("%w: %s has no cookie (wiped or new) but metadata key %s says %s existed: the entries that instance held are gone; %s",
				ErrCookie, journal, CookieKey(cfg.ID), meta, formatHint)
		}
		c := Cookie{Version: cookieVersion, BookieID: cfg.ID, InstanceID: newInstanceID(), JournalDir: journal, LedgerDir: ledgers, CreatedUnixMs: time.Now().UnixMilli()}
		if data {
			// Data written before cookies existed: adopt it.
			log.Warn("data directories without a cookie: adopting them as a new instance", "journal_dir", journal, "instance", c.InstanceID)
		}
		// Directories first: a crash before the metadata write leaves
		// cookies on disk and none in metadata, which the next start
		// completes (the reverse order would make the bookie refuse).
		for _, d := range dirs {
			if err := writeDirCookie(fsys, d, c); err != nil {
				return Cookie{}, err
			}
		}
		if cfg.Metadata != nil {
			if err := putMetaCookie(ctx, cfg.Metadata, c, metadata.MustNotExist); err != nil {
				return Cookie{}, err
			}
		}
		log.Info("bookie cookie created", "instance", c.InstanceID)
		return c, nil
	}
	c := *found
	if cfg.Metadata == nil {
		return c, nil
	}
	if !metaFound {
		// Cookies on disk, none in metadata: first start with metadata,
		// or a crash between the two writes of a format.
		if err := putMetaCookie(ctx, cfg.Metadata, c, metadata.MustNotExist); err != nil {
			return Cookie{}, err
		}
		return c, nil
	}
	if !meta.sameIdentity(c) {
		return Cookie{}, fmt.Errorf("%w: metadata key %s says %s but %s says %s: another format of this bookie ID is registered; %s",
			ErrCookie, CookieKey(cfg.ID), meta, filepath.Join(foundIn, CookieFileName), c, formatHint)
	}
	c.LimboBelowLedger = max(c.LimboBelowLedger, meta.LimboBelowLedger)
	c.LimboDecommissioned = c.LimboDecommissioned || meta.LimboDecommissioned
	return c, nil
}

// identityMetrics are the metrics of cookies, identity checks and limbo.
type identityMetrics struct {
	wrongBookie  prometheus.Counter
	limboAnswers prometheus.Counter
	limbo        prometheus.Gauge
}

func newIdentityMetrics(reg prometheus.Registerer) (*identityMetrics, error) {
	m := &identityMetrics{
		wrongBookie: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_wrong_bookie_requests_total",
			Help: "Requests refused because they named another bookie ID or instance."}),
		limboAnswers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_limbo_answers_total",
			Help: "Answers \"ledger unknown\" given instead of \"not found\" while in limbo after a re-format."}),
		limbo: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_bookie_limbo",
			Help: "1 while the re-formatted bookie is in limbo for its previous instance's ledgers."}),
	}
	for _, c := range []prometheus.Collector{m.wrongBookie, m.limboAnswers, m.limbo} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// checkIdentity refuses a request that names another bookie or instance.
// GetInfo passes empty fields (discovery); every other RPC must name both.
func (s *Server) checkIdentity(r bookiev1.ExpectedIdentity, optional bool) error {
	id, inst := r.GetExpectedBookieId(), r.GetExpectedInstanceId()
	if optional && id == "" && inst == "" {
		return nil
	}
	if id == s.cfg.ID && inst == s.instanceID {
		return nil
	}
	s.idm.wrongBookie.Inc()
	if id == "" || inst == "" {
		return fmt.Errorf("%w: the request must carry expected_bookie_id and expected_instance_id (this is bookie %s instance %s)", ErrWrongBookie, s.cfg.ID, s.instanceID)
	}
	return fmt.Errorf("%w: the request is for bookie %s instance %s, this is bookie %s instance %s", ErrWrongBookie, id, inst, s.cfg.ID, s.instanceID)
}
