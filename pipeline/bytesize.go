package pipeline

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ByteSize is a size in a pipeline file: a whole number of bytes, or a
// number with a unit: B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB,
// TiB (powers of 1024), e.g. 64KiB, 1.5GB. Units are case-insensitive.
type ByteSize int64

// UnmarshalText parses a size.
func (b *ByteSize) UnmarshalText(text []byte) error {
	v, err := ParseByteSize(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

var byteUnits = map[string]float64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

// ParseByteSize parses a ByteSize.
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	f, err := strconv.ParseFloat(num, 64)
	mul, ok := byteUnits[unit]
	if err != nil || !ok || num == "" {
		return 0, fmt.Errorf("%q is not a size (examples: 1048576, 64KiB, 128MiB, 1GB)", s)
	}
	v := math.Floor(f * mul)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return ByteSize(v), nil
}
