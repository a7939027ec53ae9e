package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	sockaddr "github.com/hashicorp/go-sockaddr"
)

// Bind and advertise addresses.
//
// Every listener binds the address of its flag (--http, --grpc, --peer,
// --gossip), 0.0.0.0 included, and other machines reach it at its advertised
// address: --advertise-<listener> when given; else the bound address when
// its host is a specific IP; else --advertise-host (default $POD_IP, which
// Kubernetes sets from the pod's status, else a private IPv4 address of this
// machine) with the bound port. Gossip needs an IP: a host name is resolved
// once at startup. The advertised addresses travel in the gossip metadata:
// peers dial the peer address, clients are sent to the gRPC one.

// advertised returns the address other machines reach a listener bound at
// bound with (see the comment at the top of this file); flag names the
// listener for errors.
func (c *Config) advertised(flag, bound, override string) (string, error) {
	if override != "" {
		return override, nil
	}
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", flag, err)
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		return bound, nil
	}
	h, err := c.defaultAdvertiseHost()
	if err != nil {
		return "", fmt.Errorf("--%s %s binds every interface: %w", flag, bound, err)
	}
	return net.JoinHostPort(h, port), nil
}

// defaultAdvertiseHost is --advertise-host (or $POD_IP), else a private
// IPv4 address of this machine.
func (c *Config) defaultAdvertiseHost() (string, error) {
	if c.AdvertiseHost != "" {
		return c.AdvertiseHost, nil
	}
	ip, err := sockaddr.GetPrivateIP()
	if err != nil {
		return "", fmt.Errorf("no private address to advertise (%v): give --advertise-host", err)
	}
	if ip == "" {
		return "", errors.New("this machine has no private IPv4 address to advertise: give --advertise-host (or set POD_IP)")
	}
	return ip, nil
}

// gossipAdvertise is the cluster's AdvertiseAddr: "" to advertise the bound
// address, else an IP:port (port 0: the bound port).
func (c *Config) gossipAdvertise(ctx context.Context) (string, error) {
	if c.AdvertiseGossip != "" {
		return c.AdvertiseGossip, nil
	}
	host, port, err := net.SplitHostPort(c.GossipAddr)
	if err != nil {
		return "", fmt.Errorf("--gossip: %w", err)
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		return "", nil
	}
	h, err := c.defaultAdvertiseHost()
	if err != nil {
		return "", fmt.Errorf("--gossip %s binds every interface: %w", c.GossipAddr, err)
	}
	if net.ParseIP(h) == nil {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ips, err := net.DefaultResolver.LookupIP(ctx, "ip", h)
		if err != nil || len(ips) == 0 {
			return "", fmt.Errorf("--advertise-host %s: gossip needs an IP address: %v", h, err)
		}
		h = ips[0].String()
		for _, ip := range ips {
			if ip.To4() != nil {
				h = ip.String()
				break
			}
		}
	}
	return net.JoinHostPort(h, port), nil
}

// dnsResolver is the resolver of the --join names: the system's, or one
// that sends every query to --resolver.
func (c *Config) dnsResolver() *net.Resolver {
	if c.Resolver == "" {
		return net.DefaultResolver
	}
	server := c.Resolver
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, server)
	}}
}

// advertisedAddrs are the addresses a node advertises ("" gossip: the bound
// one).
type advertisedAddrs struct{ http, grpc, peer, gossip string }

// advertiseAll works out every listener's advertised address from the
// bound ones.
func (c *Config) advertiseAll(ctx context.Context, httpBound, grpcBound, peerBound string) (advertisedAddrs, error) {
	var a advertisedAddrs
	var err error
	if a.http, err = c.advertised("http", httpBound, c.AdvertiseHTTP); err != nil {
		return a, err
	}
	if a.grpc, err = c.advertised("grpc", grpcBound, c.AdvertiseGRPC); err != nil {
		return a, err
	}
	if a.peer, err = c.advertised("peer", peerBound, c.AdvertisePeer); err != nil {
		return a, err
	}
	a.gossip, err = c.gossipAdvertise(ctx)
	return a, err
}
