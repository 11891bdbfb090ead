// Package faultproxy is a TCP proxy that injects network faults between a
// client and a server, for tests: latency, a bandwidth limit, connections
// reset right after a chosen request reached the server (so it ran but its
// reply is lost), and partitions (bytes stop flowing both ways).
package faultproxy

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections from its listener to a target address.
type Proxy struct {
	target string
	ln     net.Listener

	mu          sync.Mutex
	latency     time.Duration
	bytesPerSec int
	partitioned bool
	healed      chan struct{} // closed when a partition ends
	cutOn       []byte        // reset the connection after forwarding this
	cuts        int           // connections reset by cutOn
	conns       map[net.Conn]net.Conn
	closed      bool
	wg          sync.WaitGroup
}

// Start listens on a free loopback port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]net.Conn{}, healed: make(chan struct{})}
	close(p.healed)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk of bytes, both ways, by d.
func (p *Proxy) SetLatency(d time.Duration) { p.mu.Lock(); p.latency = d; p.mu.Unlock() }

// SetBandwidth limits each direction of each connection to n bytes per
// second (0: unlimited).
func (p *Proxy) SetBandwidth(n int) { p.mu.Lock(); p.bytesPerSec = n; p.mu.Unlock() }

// CutAfter arms the proxy: the next time a client sends bytes containing
// pattern, they are forwarded to the server and then that connection is
// reset, both ways, before any reply can come back. It fires once.
func (p *Proxy) CutAfter(pattern []byte) { p.mu.Lock(); p.cutOn = pattern; p.mu.Unlock() }

// Cuts returns how many connections CutAfter has reset.
func (p *Proxy) Cuts() int { p.mu.Lock(); defer p.mu.Unlock(); return p.cuts }

// Partition stops every byte both ways, on open connections and new ones,
// until Heal. Connections stay open: the peers see silence, not a reset.
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.partitioned {
		p.partitioned = true
		p.healed = make(chan struct{})
	}
}

// Heal ends a partition.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.partitioned {
		p.partitioned = false
		close(p.healed)
	}
}

// ResetAll resets every open connection.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c, s := range p.conns {
		reset(c)
		reset(s)
	}
}

// Close stops the proxy and resets its connections.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	if p.partitioned {
		p.partitioned = false
		close(p.healed)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.ResetAll()
	p.wg.Wait()
	return err
}

func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	p.wait()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		reset(c)
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		reset(c)
		reset(s)
		return
	}
	p.conns[c] = s
	p.mu.Unlock()
	// cut is set by the upstream pipe before it forwards a request that
	// arms CutAfter: from then on no reply reaches the client.
	cut := new(atomic.Bool)
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(c, s, c, true, cut) })
	wg.Go(func() { p.pipe(s, c, c, false, cut) })
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// wait blocks while a partition lasts.
func (p *Proxy) wait() {
	p.mu.Lock()
	h := p.healed
	p.mu.Unlock()
	<-h
}

// pipe copies src to dst applying the faults; upstream is the client to
// server direction, client the connection that identifies the pair, and cut
// the pair's flag that drops every reply once a CutAfter request is on its
// way (so that however fast the server answers, the client never sees it).
func (p *Proxy) pipe(src, dst, client net.Conn, upstream bool, cut *atomic.Bool) {
	graceful := false
	defer func() {
		reset(src)
		if graceful {
			_ = dst.Close()
		} else {
			reset(dst)
		}
	}()
	buf := make([]byte, 32<<10)
	var tail []byte // the end of earlier chunks, so a pattern split across reads is seen
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.wait()
			p.mu.Lock()
			lat, bw, pat := p.latency, p.bytesPerSec, p.cutOn
			p.mu.Unlock()
			if lat > 0 {
				time.Sleep(lat)
			}
			if bw > 0 {
				time.Sleep(time.Duration(n) * time.Second / time.Duration(bw))
			}
			if !upstream && cut.Load() {
				continue // the reply to a cut request: dropped
			}
			fire := false
			if upstream && pat != nil {
				seen := append(tail, buf[:n]...)
				if bytes.Contains(seen, pat) {
					p.mu.Lock()
					fire = p.cutOn != nil
					p.cutOn = nil
					if fire {
						p.cuts++
					}
					p.mu.Unlock()
				}
				tail = append(tail[:0], seen[max(0, len(seen)-len(pat)):]...)
			}
			if fire {
				cut.Store(true) // before the request leaves: no reply gets through
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			if fire {
				// The client loses the connection now, before any reply;
				// the server gets a plain close after it has had time to
				// read and run the request (a reset could make its kernel
				// drop the unread request).
				reset(client)
				time.Sleep(100 * time.Millisecond)
				graceful = true
				return
			}
		}
		if err != nil {
			return
		}
	}
}
