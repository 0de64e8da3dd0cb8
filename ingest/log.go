package ingest

import (
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// kgoLogger sends franz-go's logs to zap. Debug is dropped: it is a
// firehose meant for the client's own developers.
type kgoLogger struct{ log *zap.Logger }

func (l kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	fields := make([]zap.Field, 0, len(keyvals)/2)
	for i := 0; i+1 < len(keyvals); i += 2 {
		k, _ := keyvals[i].(string)
		fields = append(fields, zap.Any(k, keyvals[i+1]))
	}
	switch level {
	case kgo.LogLevelError:
		l.log.Error(msg, fields...)
	case kgo.LogLevelWarn:
		l.log.Warn(msg, fields...)
	default:
		l.log.Info(msg, fields...)
	}
}
