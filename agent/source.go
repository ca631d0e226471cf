package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/aws"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/gce"
)

// source is a metadata service as the agent needs it, whichever the
// provider: this VM's name, a stream of notice lists, and approval.
type source interface {
	provider() forewarn.Provider
	// self returns this VM's name as the service knows it.
	self(ctx context.Context) (string, error)
	// watch calls fn with the current notices at once and again at
	// every change, until ctx ends or the watch fails.
	watch(ctx context.Context, fn func([]forewarn.Notice) error) error
	// approve lets the events ids start now.
	approve(ctx context.Context, ids ...string) error
}

// errNoApproval is returned by a source whose provider cannot approve.
var errNoApproval = errors.New("the provider has no approval API")

// azureSource adapts an azure.Client.
type azureSource struct{ c *azure.Client }

var _ source = azureSource{}

func (azureSource) provider() forewarn.Provider { return forewarn.Azure }

func (s azureSource) self(ctx context.Context) (string, error) { return s.c.VMName(ctx) }

func (s azureSource) watch(ctx context.Context, fn func([]forewarn.Notice) error) error {
	return s.c.Watch(ctx, func(d *azure.Document) error { return fn(d.Notices) })
}

func (s azureSource) approve(ctx context.Context, ids ...string) error {
	return s.c.Approve(ctx, ids...)
}

// gceSource adapts a gce.Client.
type gceSource struct{ c *gce.Client }

var _ source = gceSource{}

func (gceSource) provider() forewarn.Provider { return forewarn.GCE }

func (s gceSource) self(ctx context.Context) (string, error) { return s.c.InstanceName(ctx) }

func (s gceSource) watch(ctx context.Context, fn func([]forewarn.Notice) error) error {
	return s.c.Watch(ctx, fn)
}

func (gceSource) approve(context.Context, ...string) error { return errNoApproval }

// awsSource adapts an aws.Client. This VM's name is its instance ID, as
// its notices' Resources show it.
type awsSource struct{ c *aws.Client }

var _ source = awsSource{}

func (awsSource) provider() forewarn.Provider { return forewarn.AWS }

func (s awsSource) self(ctx context.Context) (string, error) { return s.c.InstanceID(ctx) }

func (s awsSource) watch(ctx context.Context, fn func([]forewarn.Notice) error) error {
	return s.c.Watch(ctx, fn)
}

func (awsSource) approve(context.Context, ...string) error { return errNoApproval }

// newSource returns the source of the configured provider, probing the
// endpoint first for auto.
func (a *Agent) newSource(ctx context.Context) (source, error) {
	p := a.cfg.Provider
	if p == ProviderAuto {
		var err error
		if p, err = a.probe(ctx); err != nil {
			return nil, err
		}
		a.log.Info("provider detected", "provider", p)
	}
	switch p {
	case ProviderAzure:
		opts := []azure.ClientOption{azure.WithLogger(a.log)}
		if a.cfg.HTTPClient != nil {
			opts = append(opts, azure.WithHTTPClient(a.cfg.HTTPClient))
		}
		if a.cfg.PollInterval > 0 {
			opts = append(opts, azure.WithPollInterval(a.cfg.PollInterval))
		}
		return azureSource{azure.NewClient(a.cfg.Endpoint, opts...)}, nil
	case ProviderAWS:
		opts := []aws.ClientOption{aws.WithLogger(a.log)}
		if a.cfg.HTTPClient != nil {
			opts = append(opts, aws.WithHTTPClient(a.cfg.HTTPClient))
		}
		if a.cfg.PollInterval > 0 {
			opts = append(opts, aws.WithPollInterval(a.cfg.PollInterval))
		}
		return awsSource{aws.NewClient(a.cfg.Endpoint, opts...)}, nil
	}
	opts := []gce.ClientOption{gce.WithLogger(a.log)}
	if a.cfg.HTTPClient != nil {
		opts = append(opts, gce.WithHTTPClient(a.cfg.HTTPClient))
	}
	return gceSource{gce.NewClient(a.cfg.Endpoint, opts...)}, nil
}

// probeTimeout bounds each probe request.
const probeTimeout = 3 * time.Second

// probe finds which metadata API answers: Azure when compute/name with
// Metadata: true answers 200, Compute Engine when instance/name with
// Metadata-Flavor: Google answers 200 with a Metadata-Flavor: Google
// header, EC2 when meta-data/instance-id answers 200 with an IMDSv2
// token (or, when the token PUT fails, without one). All are asked at
// once; Azure wins over Compute Engine, which wins over EC2.
func (a *Agent) probe(ctx context.Context) (string, error) {
	azBase, gceBase, awsBase := a.cfg.Endpoint, a.cfg.Endpoint, a.cfg.Endpoint
	if azBase == "" {
		azBase = azure.DefaultEndpoint
	}
	if gceBase == "" {
		gceBase = gce.DefaultEndpoint
		if h := os.Getenv(gce.HostEnv); h != "" {
			gceBase = "http://" + h
		}
	}
	if awsBase == "" {
		awsBase = aws.DefaultEndpoint
		if e := os.Getenv(aws.EndpointEnv); e != "" {
			awsBase = e
		}
	}
	hc := a.cfg.HTTPClient
	if hc == nil {
		// The metadata services are link-local: never through a proxy.
		hc = &http.Client{Transport: &http.Transport{Proxy: nil}}
	}
	type answer struct {
		provider string
		err      error
	}
	answers := make(chan answer, 3)
	go func() {
		err := probeOne(ctx, hc, strings.TrimRight(azBase, "/")+"/metadata/instance/compute/name?api-version=2021-02-01&format=text",
			"Metadata", "true", "")
		answers <- answer{ProviderAzure, err}
	}()
	go func() {
		err := probeOne(ctx, hc, strings.TrimRight(gceBase, "/")+"/computeMetadata/v1/instance/name",
			"Metadata-Flavor", "Google", "Metadata-Flavor")
		answers <- answer{ProviderGCE, err}
	}()
	go func() {
		answers <- answer{ProviderAWS, probeAWS(ctx, hc, strings.TrimRight(awsBase, "/"))}
	}()
	errs := map[string]error{}
	for range 3 {
		ans := <-answers
		errs[ans.provider] = ans.err
	}
	switch {
	case errs[ProviderAzure] == nil:
		return ProviderAzure, nil
	case errs[ProviderGCE] == nil:
		return ProviderGCE, nil
	case errs[ProviderAWS] == nil:
		return ProviderAWS, nil
	case ctx.Err() != nil:
		return "", ctx.Err()
	}
	return "", fmt.Errorf("--provider auto: no metadata service answered (azure at %s: %v; gce at %s: %v; aws at %s: %v); set --provider and --endpoint",
		azBase, errs[ProviderAzure], gceBase, errs[ProviderGCE], awsBase, errs[ProviderAWS])
}

// probeAWS asks base for an IMDSv2 token and reports whether
// meta-data/instance-id answers 200 with it, or without it (IMDSv1) when
// no token was given.
func probeAWS(ctx context.Context, hc *http.Client, base string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+aws.TokenPath, nil)
	if err != nil {
		return err
	}
	req.Header.Set(aws.TokenTTLHeader, "60")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if err != nil {
		return err
	}
	key, tok := "", ""
	if resp.StatusCode == http.StatusOK {
		key, tok = aws.TokenHeader, strings.TrimSpace(string(b))
	}
	return probeOne(ctx, hc, base+"/latest/meta-data/instance-id", key, tok, "")
}

// probeOne GETs url with the header key: value, if key is not empty,
// and reports whether it answered 200, with the response header want set
// to value if want is not empty.
func probeOne(ctx context.Context, hc *http.Client, url, key, value, want string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if key != "" {
		req.Header.Set(key, value)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("answered %s", resp.Status)
	}
	if want != "" && resp.Header.Get(want) != value {
		return fmt.Errorf("answered without the %s: %s header", want, value)
	}
	return nil
}
