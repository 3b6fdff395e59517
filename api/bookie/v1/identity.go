package bookiev1

// ExpectedIdentity is implemented by every request that carries the
// identity of the bookie the caller means (expected_bookie_id,
// expected_instance_id). Interceptors use it to stamp requests.
type ExpectedIdentity interface {
	// SetExpectedIdentity sets expected_bookie_id and expected_instance_id.
	SetExpectedIdentity(bookieID, instanceID string)
	// GetExpectedBookieId returns expected_bookie_id.
	GetExpectedBookieId() string
	// GetExpectedInstanceId returns expected_instance_id.
	GetExpectedInstanceId() string
}

// SetExpectedIdentity implements ExpectedIdentity.
func (x *AddEntryRequest) SetExpectedIdentity(id, inst string) {
	x.ExpectedBookieId, x.ExpectedInstanceId = id, inst
}

// SetExpectedIdentity implements ExpectedIdentity.
func (x *AddEntriesRequest) SetExpectedIdentity(id, inst string) {
	x.ExpectedBookieId, x.ExpectedInstanceId = id, inst
}

// SetExpectedIdentity implements ExpectedIdentity.
func (x *ReadEntryRequest) SetExpectedIdentity(id, inst string) {
	x.ExpectedBookieId, x.ExpectedInstanceId = id, inst
}

// SetExpectedIdentity implements ExpectedIdentity.
func (x *ReadRangeRequest) SetExpectedIdentity(id, inst string) {
	x.ExpectedBookieId, x.ExpectedInstanceId = id, inst
}

// SetExpectedIdentity implements ExpectedIdentity.
func (x *ReadLastAddConfirmedRequest) SetExpectedIdentity(id, inst string) {
	x.ExpectedBookieId, x.ExpectedInstanceId = id, inst
}

// SetExpectedIdentity implements ExpectedIdentity.
func (x *FenceRequest) SetExpectedIdentity(id, inst string) {
	x.ExpectedBookieId, x.ExpectedInstanceId = id, inst
}

// SetExpectedIdentity implements ExpectedIdentity.
func (x *DeleteLedgerRequest) SetExpectedIdentity(id, inst string) {
	x.ExpectedBookieId, x.ExpectedInstanceId = id, inst
}

// SetExpectedIdentity implements ExpectedIdentity.
func (x *GetInfoRequest) SetExpectedIdentity(id, inst string) {
	x.ExpectedBookieId, x.ExpectedInstanceId = id, inst
}

// SetExpectedIdentity implements ExpectedIdentity.
func (x *ScrubRequest) SetExpectedIdentity(id, inst string) {
	x.ExpectedBookieId, x.ExpectedInstanceId = id, inst
}
