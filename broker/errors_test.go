package broker_test

import (
	"fmt"
	"strings"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/metadata"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestMetadataLimitError: a metadata store limit reaches clients as
// NOT_ALLOWED / ResourceExhausted with the limit named, not as an internal
// error.
func TestMetadataLimitError(t *testing.T) {
	err := fmt.Errorf("create topic: %w", fmt.Errorf("%w: max_keys 5 reached", metadata.ErrLimitExceeded))
	e := broker.ToError(err)
	if e.GetCode() != clientv1.ErrorCode_ERROR_CODE_NOT_ALLOWED || !strings.Contains(e.GetMessage(), "max_keys 5") {
		t.Fatalf("ToError: %v, want NOT_ALLOWED naming max_keys 5", e)
	}
	if c := status.Code(broker.GRPCError(err)); c != codes.ResourceExhausted {
		t.Fatalf("GRPCError code %v, want ResourceExhausted", c)
	}
}
