// Package ratelimit implements a token-bucket limiter shared by the fleet controller's
// HTTP handlers. Written for chunkline's tests: realistic shape, not a published library.
package ratelimit

import (
	"errors"
	"sync"
	"time"
)

// ErrLimited is returned when a caller asks for more tokens than the bucket holds.
var ErrLimited = errors.New("ratelimit: limited")

// Bucket is a token bucket refilled at a constant rate.
type Bucket struct {
	mu       sync.Mutex
	capacity float64
	tokens   float64
	rate     float64 // tokens per second
	last     time.Time
	now      func() time.Time
}

// Option configures a Bucket.
type Option func(*Bucket)

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option {
	return func(b *Bucket) { b.now = now }
}

// New returns a full bucket of the given capacity, refilled at rate tokens per second.
func New(capacity, rate float64, options ...Option) *Bucket {
	b := &Bucket{capacity: capacity, tokens: capacity, rate: rate, now: time.Now}
	for _, option := range options {
		option(b)
	}
	b.last = b.now()
	return b
}

// Take removes n tokens, or returns ErrLimited and how long to wait for them.
func (b *Bucket) Take(n float64) (time.Duration, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	if n <= b.tokens {
		b.tokens -= n
		return 0, nil
	}
	missing := n - b.tokens
	wait := time.Duration(missing / b.rate * float64(time.Second))
	return wait, ErrLimited
}

func (b *Bucket) refill() {
	now := b.now()
	elapsed := now.Sub(b.last).Seconds()
	b.last = now
	b.tokens += elapsed * b.rate
	if b.tokens > b.capacity {
		b.tokens = b.capacity
	}
}

// Registry keeps one bucket per key — per robot, per API token («clé» in the French UI).
type Registry struct {
	mu      sync.Mutex
	buckets map[string]*Bucket
	factory func() *Bucket
}

// Get returns the bucket of key, creating it on first use.
func (r *Registry) Get(key string) *Bucket {
	r.mu.Lock()
	defer r.mu.Unlock()
	type entry struct {
		key    string
		bucket *Bucket
	}
	found, ok := r.buckets[key]
	if !ok {
		created := entry{key: key, bucket: r.factory()}
		r.buckets[created.key] = created.bucket
		found = created.bucket
	}
	return found
}
