package ingest

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// kgoLogger sends franz-go's logs to zap. Debug is dropped: it is a
// firehose meant for the client's own developers.
type kgoLogger struct{ log *zap.Logger }

func (l kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	fields := make([]zap.Field, 0, len(keyvals)/2+1)
	sasl := false
	for i := 0; i+1 < len(keyvals); i += 2 {
		k, _ := keyvals[i].(string)
		if err, ok := keyvals[i+1].(error); ok && saslFailure(err) {
			sasl = true
		}
		fields = append(fields, zap.Any(k, keyvals[i+1]))
	}
	if sasl {
		// The client retries forever and nothing else fails loudly: say
		// plainly what is wrong and where to fix it.
		l.log.Error("kafka SASL authentication failed: check kafka.sasl (mechanism, username, password or token)",
			append(fields, zap.String("client_msg", msg))...)
		return
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

// saslFailure reports whether err is a broker's refusal of our SASL
// credentials or mechanism.
func saslFailure(err error) bool {
	return errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, kerr.UnsupportedSaslMechanism) ||
		errors.Is(err, kerr.IllegalSaslState)
}
