package pgstore

// The batch statements whose plans TestBatchStatementsJoinByPrimaryKey
// checks.
var (
	CompleteSQL  = completeSQL
	HeartbeatSQL = heartbeatSQL
	ReleaseSQL   = releaseSQL
)
