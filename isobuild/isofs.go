package isobuild

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
)

// This file is a small, independent ISO 9660 + Rock Ridge reader. The writer
// uses it to normalise what go-diskfs wrote and to verify the finished image;
// ReadManifest uses it on any ISO, so it treats its input as hostile: every
// offset is bounds-checked, directory loops are refused, sizes are capped.

const (
	sectorSize   = 2048
	pvdOffset    = 16 * sectorSize
	maxDirBytes  = 16 << 20 // one directory extent
	maxEntries   = 1 << 20  // records in the whole image
	maxDepth     = 64
	maxCEHops    = 32 // continuation areas per record
	maxNameBytes = 4096
)

// extent is one contiguous run of a file's data.
type extent struct {
	off  int64 // byte offset in the image
	size int64
}

// suspEntry is one System Use entry with its absolute offset in the image.
type suspEntry struct {
	off  int64
	data []byte // whole entry, header included
}

func (e suspEntry) sig() string { return string(e.data[:2]) }

// record is one parsed directory record.
type record struct {
	off    int64 // absolute offset of the record
	raw    []byte
	extent uint32
	size   uint32
	flags  byte
	id     string
	name   string // Rock Ridge name, else the ISO name without ";1"
	mode   fs.FileMode
	hasPX  bool
	susp   []suspEntry
	dot    bool // "." or ".."
	isDir  bool
	relocated,
	childLink bool
	symlink bool
}

// volume is what the primary volume descriptor says.
type volume struct {
	label     string
	blocks    uint32
	root      record
	rockRidge bool
	suspSkip  int
}

func readVolume(r io.ReaderAt, imageSize int64) (*volume, error) {
	if imageSize < pvdOffset+sectorSize {
		return nil, fmt.Errorf("not an ISO 9660 image: only %d bytes", imageSize)
	}
	// Scan the descriptor set for the primary descriptor (type 1).
	var pvd []byte
	for i := int64(0); i < 64; i++ {
		b := make([]byte, sectorSize)
		off := pvdOffset + i*sectorSize
		if off+sectorSize > imageSize {
			break
		}
		if _, err := r.ReadAt(b, off); err != nil {
			return nil, fmt.Errorf("reading volume descriptor: %w", err)
		}
		if string(b[1:6]) != "CD001" {
			return nil, errors.New("not an ISO 9660 image: no CD001 volume descriptor at sector 16")
		}
		if b[0] == 1 {
			pvd = b
			break
		}
		if b[0] == 255 {
			break
		}
	}
	if pvd == nil {
		return nil, errors.New("not an ISO 9660 image: no primary volume descriptor")
	}
	if bs := binary.LittleEndian.Uint16(pvd[128:130]); bs != sectorSize {
		return nil, fmt.Errorf("logical block size %d not supported (want 2048)", bs)
	}
	v := &volume{
		label:  strings.TrimRight(string(pvd[40:72]), " \x00"),
		blocks: binary.LittleEndian.Uint32(pvd[80:84]),
	}
	root, err := parseRecord(pvd[156:190], pvdOffset+156)
	if err != nil {
		return nil, fmt.Errorf("root directory record: %w", err)
	}
	v.root = root
	// Rock Ridge announces itself with an SP entry in the root's "." record.
	self, err := readDirRecords(r, imageSize, root.extent, root.size)
	if err != nil {
		return nil, fmt.Errorf("root directory: %w", err)
	}
	if len(self) > 0 {
		su := systemUse(self[0].b, 0)
		if len(su) >= 7 && string(su[:2]) == "SP" && su[2] >= 7 && su[4] == 0xBE && su[5] == 0xEF {
			v.rockRidge = true
			v.suspSkip = int(su[6])
		}
	}
	return v, nil
}

// parseRecord decodes the fixed part of a directory record.
func parseRecord(b []byte, off int64) (record, error) {
	if len(b) < 34 || int(b[0]) > len(b) || b[0] < 34 {
		return record{}, fmt.Errorf("directory record at byte %d: bad length", off)
	}
	b = b[:b[0]]
	nl := int(b[32])
	if 33+nl > len(b) {
		return record{}, fmt.Errorf("directory record at byte %d: identifier overruns the record", off)
	}
	rec := record{
		off:    off,
		raw:    b,
		extent: binary.LittleEndian.Uint32(b[2:6]),
		size:   binary.LittleEndian.Uint32(b[10:14]),
		flags:  b[25],
		id:     string(b[33 : 33+nl]),
	}
	rec.isDir = rec.flags&0x02 != 0
	rec.dot = nl == 1 && (b[33] == 0 || b[33] == 1)
	return rec, nil
}

// systemUse returns the record's System Use area after skip bytes.
func systemUse(b []byte, skip int) []byte {
	nl := int(b[32])
	start := 33 + nl
	if nl%2 == 0 {
		start++ // padding byte after an even-length identifier
	}
	start += skip
	if start >= len(b) {
		return nil
	}
	return b[start:]
}

// rawRecord is a directory record's bytes and its offset inside the extent.
type rawRecord struct {
	pos int64
	b   []byte
}

func readDirRecords(r io.ReaderAt, imageSize int64, ext, size uint32) ([]rawRecord, error) {
	off := int64(ext) * sectorSize
	if size > maxDirBytes {
		return nil, fmt.Errorf("directory at block %d: %d bytes is implausibly large", ext, size)
	}
	if off+int64(size) > imageSize {
		return nil, fmt.Errorf("directory at block %d runs past the end of the image", ext)
	}
	buf := make([]byte, size)
	if _, err := r.ReadAt(buf, off); err != nil && !(errors.Is(err, io.EOF) && size == 0) {
		return nil, fmt.Errorf("reading directory at block %d: %w", ext, err)
	}
	var recs []rawRecord
	for pos := 0; pos < len(buf); {
		l := int(buf[pos])
		if l == 0 { // records never cross a sector: skip to the next one
			pos = (pos/sectorSize + 1) * sectorSize
			continue
		}
		if l < 34 || pos+l > len(buf) || pos/sectorSize != (pos+l-1)/sectorSize {
			return nil, fmt.Errorf("directory at block %d: corrupt record at byte %d", ext, pos)
		}
		recs = append(recs, rawRecord{pos: int64(pos), b: buf[pos : pos+l]})
		pos += l
	}
	return recs, nil
}

// walker walks a directory tree. Records hold absolute offsets so callers can
// patch them in place.
type walker struct {
	r       io.ReaderAt
	size    int64
	vol     *volume
	visited map[uint32]bool
	entries int
}

// dirVisit is called once per directory with its path ("" for the root) and
// records (".", ".." first, as stored).
type dirVisit func(dir string, recs []*record) error

func (w *walker) walk(visit dirVisit) error {
	w.visited = map[uint32]bool{}
	return w.walkDir("", w.vol.root.extent, w.vol.root.size, 0, visit)
}

func (w *walker) walkDir(dir string, ext, size uint32, depth int, visit dirVisit) error {
	if depth > maxDepth {
		return fmt.Errorf("directory %q: nested deeper than %d", dir, maxDepth)
	}
	if w.visited[ext] {
		return fmt.Errorf("directory %q: loop (block %d seen before)", dir, ext)
	}
	w.visited[ext] = true
	raws, err := readDirRecords(w.r, w.size, ext, size)
	if err != nil {
		return err
	}
	base := int64(ext) * sectorSize
	recs := make([]*record, 0, len(raws))
	names := map[string]bool{}
	for i, raw := range raws {
		w.entries++
		if w.entries > maxEntries {
			return fmt.Errorf("more than %d directory records", maxEntries)
		}
		rec, err := parseRecord(raw.b, base+raw.pos)
		if err != nil {
			return err
		}
		if err := w.parseSUSP(&rec, i == 0 && depth == 0); err != nil {
			return fmt.Errorf("directory %q: %w", dir, err)
		}
		if i < 2 {
			if !rec.dot {
				return fmt.Errorf("directory %q: its first two records are not the dot entries", dir)
			}
		} else {
			if rec.dot {
				return fmt.Errorf("directory %q: stray . or .. record", dir)
			}
			if err := checkName(rec.name); err != nil {
				return fmt.Errorf("directory %q: %w", dir, err)
			}
			if names[rec.name] && rec.flags&0x80 == 0 && !isMultiExtentTail(recs, rec.name) {
				return fmt.Errorf("directory %q: name %q appears twice", dir, rec.name)
			}
			names[rec.name] = true
		}
		recs = append(recs, &rec)
	}
	if len(recs) < 2 {
		return fmt.Errorf("directory %q: missing . and .. records", dir)
	}
	if err := visit(dir, recs); err != nil {
		return err
	}
	for _, rec := range recs[2:] {
		if rec.childLink {
			return fmt.Errorf("directory %q: relocated directories (Rock Ridge CL/RE) are not supported", join(dir, rec.name))
		}
		if !rec.isDir || rec.relocated {
			continue
		}
		if err := w.walkDir(join(dir, rec.name), rec.extent, rec.size, depth+1, visit); err != nil {
			return err
		}
	}
	return nil
}

func isMultiExtentTail(recs []*record, name string) bool {
	return len(recs) > 0 && recs[len(recs)-1].name == name && recs[len(recs)-1].flags&0x80 != 0
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func checkName(n string) error {
	switch {
	case n == "" || n == "." || n == "..":
		return fmt.Errorf("invalid file name %q", n)
	case strings.ContainsAny(n, "/\x00"):
		return fmt.Errorf("file name %q contains / or NUL", n)
	case len(n) > 1024:
		return fmt.Errorf("file name %.40q... too long", n)
	}
	return nil
}

// parseSUSP reads the record's System Use entries, following continuation
// areas, and derives name, mode and flags.
func (w *walker) parseSUSP(rec *record, rootSelf bool) error {
	rec.name = isoName(rec.id)
	if !w.vol.rockRidge {
		return nil
	}
	skip := w.vol.suspSkip
	if rootSelf {
		skip = 0 // the SP entry itself is not skipped
	}
	area := systemUse(rec.raw, skip)
	areaOff := rec.off + int64(len(rec.raw)-len(area))
	var nm []byte
	nmSeen := false
	for hop := 0; area != nil; hop++ {
		if hop > maxCEHops {
			return fmt.Errorf("record %q: more than %d continuation areas", rec.id, maxCEHops)
		}
		var next []byte
		var nextOff int64
		for p := 0; p+4 <= len(area); {
			l := int(area[p+2])
			if l < 4 || p+l > len(area) {
				break // padding or garbage: stop like Linux does
			}
			e := suspEntry{off: areaOff + int64(p), data: area[p : p+l]}
			rec.susp = append(rec.susp, e)
			d := e.data
			switch e.sig() {
			case "ST":
				p = len(area)
				continue
			case "CE":
				if l < 28 {
					return fmt.Errorf("record %q: short CE entry", rec.id)
				}
				blk := binary.LittleEndian.Uint32(d[4:8])
				o := binary.LittleEndian.Uint32(d[12:16])
				n := binary.LittleEndian.Uint32(d[20:24])
				abs := int64(blk)*sectorSize + int64(o)
				if n > sectorSize || abs+int64(n) > w.size {
					return fmt.Errorf("record %q: continuation area out of bounds", rec.id)
				}
				next = make([]byte, n)
				if _, err := w.r.ReadAt(next, abs); err != nil {
					return fmt.Errorf("record %q: continuation area: %w", rec.id, err)
				}
				nextOff = abs
			case "NM":
				if l >= 5 && d[4]&0x06 == 0 {
					nm = append(nm, d[5:]...)
					nmSeen = true
					if len(nm) > maxNameBytes {
						return fmt.Errorf("record %q: Rock Ridge name too long", rec.id)
					}
				}
			case "PX":
				if l >= 36 {
					rec.mode = posixMode(binary.LittleEndian.Uint32(d[4:8]))
					rec.hasPX = true
				}
			case "SL":
				rec.symlink = true
			case "CL":
				rec.childLink = true
			case "RE":
				rec.relocated = true
			}
			p += l
		}
		area, areaOff = next, nextOff
	}
	if nmSeen && !rec.dot {
		rec.name = string(nm)
	}
	return nil
}

// isoName turns an ISO 9660 identifier into a file name: "KUBEADM.;1" -> "KUBEADM".
func isoName(id string) string {
	if i := strings.LastIndexByte(id, ';'); i >= 0 {
		id = id[:i]
	}
	return strings.TrimSuffix(id, ".")
}

func posixMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	switch m & 0o170000 {
	case 0o040000:
		mode |= fs.ModeDir
	case 0o120000:
		mode |= fs.ModeSymlink
	case 0o100000, 0:
	default:
		mode |= fs.ModeIrregular
	}
	return mode
}

// entry is a regular file found in an image.
type entry struct {
	path    string
	size    int64
	mode    fs.FileMode
	hasMode bool
	extents []extent
}

// listFiles walks the image and returns its regular files in path order
// (directory order as walked) and its directories.
func listFiles(r io.ReaderAt, imageSize int64) (*volume, []*entry, []string, error) {
	v, err := readVolume(r, imageSize)
	if err != nil {
		return nil, nil, nil, err
	}
	w := &walker{r: r, size: imageSize, vol: v}
	var files []*entry
	var dirs []string
	err = w.walk(func(dir string, recs []*record) error {
		if dir != "" {
			dirs = append(dirs, dir)
		}
		var cur *entry
		for _, rec := range recs[2:] {
			if rec.isDir || rec.relocated {
				cur = nil
				continue
			}
			if rec.symlink || (rec.hasPX && !rec.mode.IsRegular()) {
				cur = nil
				continue
			}
			start := int64(rec.extent) * sectorSize
			if start+int64(rec.size) > imageSize {
				return fmt.Errorf("file %q: data runs past the end of the image (block %d, %d bytes)", join(dir, rec.name), rec.extent, rec.size)
			}
			ext := extent{off: start, size: int64(rec.size)}
			if cur != nil && cur.path == join(dir, rec.name) {
				cur.extents = append(cur.extents, ext) // multi-extent continuation
				cur.size += ext.size
			} else {
				cur = &entry{path: join(dir, rec.name), size: ext.size, mode: rec.mode.Perm(), hasMode: rec.hasPX, extents: []extent{ext}}
				files = append(files, cur)
			}
			if rec.flags&0x80 == 0 {
				cur = nil
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return v, files, dirs, nil
}
