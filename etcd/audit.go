package etcd

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The audit log of operator writes is shared through etcd, so that every
// replica's GET /v1/audit shows the writes all replicas received. Its
// lines live beside the state, under the prefix with "-audit/" in place
// of the final slash ("/forewarn-audit/" for "/forewarn/"), so that
// loading the state never reads them. A line's key is the time it was
// written, in Unix nanoseconds, then the writing store's random ID and a
// sequence number: keys sort by time across replicas.

// MaxAuditLines bounds how many of the newest lines AuditLines returns.
const MaxAuditLines = 100_000

// auditState is the per-store part of the audit keys.
type auditState struct {
	id  string // random, per Store
	seq atomic.Uint64
}

func (s *Store) auditPrefix() string { return strings.TrimSuffix(s.prefix, "/") + "-audit/" }

// AppendAuditLines appends lines (each one JSON object, without its
// newline) to the shared audit log in one transaction.
func (s *Store) AppendAuditLines(ctx context.Context, lines [][]byte) error {
	if len(lines) == 0 {
		return nil
	}
	s.auditOnce.Do(func() { s.audit.id = rand.Text()[:8] })
	now := time.Now().UnixNano()
	ops := make([]clientv3.Op, len(lines))
	for i, ln := range lines {
		key := fmt.Sprintf("%s%020d-%s-%010d", s.auditPrefix(), now, s.audit.id, s.audit.seq.Add(1))
		ops[i] = clientv3.OpPut(key, string(ln))
	}
	return s.call(ctx, "append audit lines", func(ctx context.Context) error {
		_, err := s.cli.Txn(ctx).Then(ops...).Commit()
		return err
	})
}

// AuditLines returns the newest MaxAuditLines lines of the shared audit
// log, oldest first.
func (s *Store) AuditLines(ctx context.Context) ([][]byte, error) {
	var resp *clientv3.GetResponse
	err := s.call(ctx, "read audit lines", func(ctx context.Context) (err error) {
		resp, err = s.cli.Get(ctx, s.auditPrefix(), clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(MaxAuditLines))
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = kv.Value
	}
	slices.Reverse(out)
	return out, nil
}
