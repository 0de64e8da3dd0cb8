{{/* Names. */}}
{{- define "switchyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "switchyard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "switchyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "switchyard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "switchyard.selectorLabels" . }}
app.kubernetes.io/version: {{ include "switchyard.version" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "switchyard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "switchyard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The pods' and the migration's image: image.tag, else the chart's
appVersion (a release tag, never latest). toString: --set image.tag=2
reads a number.
*/}}
{{- define "switchyard.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion | toString }}
{{- end }}

{{- define "switchyard.image" -}}
{{- printf "%s:%s" .Values.image.repository (include "switchyard.tag" .) }}
{{- end }}

{{/*
switchyard.version is the version label: the tag the pods run, not the
chart's appVersion when image.tag overrides it. Only the tag of a
"tag@sha256:…", and a label value is at most 63 characters with an
alphanumeric at each end, where a tag may have 128 and start with "_".
*/}}
{{- define "switchyard.version" -}}
{{- $tag := include "switchyard.tag" . | splitList "@" | first }}
{{- regexReplaceAll "^[-_.]+|[-_.]+$" ($tag | trunc 63) "" }}
{{- end }}

{{/*
switchyard.config is the config file: .Values.config with the Service's
names added to http.allowed_hosts. switchyard.migrateConfig is the same
with http.listen off and without kafka.sasl and kafka.tls: the migration
serves nothing and never dials Kafka, so it needs no token, no Kafka
secret, and its config names no Kafka file (it mounts extraVolumes all
the same, for the Postgres URL's sslrootcert).
*/}}
{{- define "switchyard.configDict" -}}
{{- $cfg := deepCopy (default (dict) .Values.config) }}
{{- /* The config goes into ConfigMaps, which are not Secrets: a secret
written in it would be readable by whoever may read ConfigMaps (and would
be in the migration's copy too). Each has a variable the chart fills from
the Secret instead. */}}
{{- range $field, $key := dict "postgres.url" "secrets.databaseURLKey" "http.token" "secrets.adminTokenKey" "kafka.sasl.password" "secrets.kafkaSASLPasswordKey" }}
{{- $v := $cfg }}
{{- range splitList "." $field }}{{ $v = get (default (dict) $v) . }}{{ end }}
{{- if $v }}
{{- fail (printf "config.%s: a secret goes in the Secret (%s), never in values: the config is rendered into ConfigMaps" $field $key) }}
{{- end }}
{{- end }}
{{- $http := default (dict) $cfg.http }}
{{- $svc := include "switchyard.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $hosts := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) }}
{{- $_ := set $http "allowed_hosts" (concat (default (list) $http.allowed_hosts) $hosts | uniq) }}
{{- $_ := set $cfg "http" $http }}
{{- toJson $cfg }}
{{- end }}

{{- define "switchyard.config" -}}
{{- include "switchyard.configDict" . | fromJson | toYaml }}
{{- end }}

{{- define "switchyard.migrateConfig" -}}
{{- $cfg := include "switchyard.configDict" . | fromJson }}
{{- $_ := set $cfg.http "listen" "off" }}
{{- /* migrate never dials Kafka: no SASL secret, no TLS files to read */}}
{{- if $cfg.kafka }}
{{- $_ := unset $cfg.kafka "sasl" }}
{{- $_ := unset $cfg.kafka "tls" }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/* The container port: the port of config.http.listen. */}}
{{- define "switchyard.port" -}}
{{- $listen := toString (default "" (default (dict) .Values.config.http).listen) }}
{{- if not (regexMatch ":[0-9]+$" $listen) }}
{{- fail (printf "config.http.listen: %q: in a pod Switchyard must listen on host:port (0.0.0.0:8080): probes and scrapes need it" $listen) }}
{{- end }}
{{- regexFind "[0-9]+$" $listen }}
{{- end }}

{{/*
switchyard.seconds turns a Go duration ("30s", "1m30s", "1.5h", "250ms")
into whole seconds, rounded up. Switchyard parses it with
time.ParseDuration; this reads the same units.
*/}}
{{- define "switchyard.seconds" -}}
{{- $d := toString .value }}
{{- if eq $d "0" }}0{{ else }}
{{- if not (regexMatch "^([0-9]+(\\.[0-9]*)?(h|m|s|ms|us|µs|ns))+$" $d) }}
{{- fail (printf "%s: %q: want a duration such as 30s or 1m30s" .field $d) }}
{{- end }}
{{- $scale := dict "h" 3600.0 "m" 60.0 "s" 1.0 "ms" 0.001 "us" 0.000001 "µs" 0.000001 "ns" 0.000000001 }}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9]+(\\.[0-9]*)?(h|ms|m|s|us|µs|ns)" $d -1 }}
{{- $unit := regexFind "(h|ms|m|s|us|µs|ns)$" . }}
{{- $total = addf $total (mulf (float64 (trimSuffix $unit .)) (get $scale $unit)) }}
{{- end }}
{{- ceil $total | int }}
{{- end }}
{{- end }}

{{/* terminationGracePeriodSeconds: above shutdown_grace, always. */}}
{{- define "switchyard.terminationGrace" -}}
{{- $grace := include "switchyard.seconds" (dict "field" "config.shutdown_grace" "value" (default "30s" .Values.config.shutdown_grace)) | int }}
{{- $set := toString .Values.terminationGracePeriodSeconds }}
{{- if eq $set "" }}
{{- $margin := int .Values.terminationGraceMarginSeconds }}
{{- if lt $margin 1 }}
{{- fail (printf "terminationGraceMarginSeconds: %d: must be at least 1, so that leases are released and offsets stored after shutdown_grace" $margin) }}
{{- end }}
{{- add $grace $margin }}
{{- else }}
{{- $n := int .Values.terminationGracePeriodSeconds }}
{{- if le $n $grace }}
{{- fail (printf "terminationGracePeriodSeconds: %d is not above config.shutdown_grace (%ds): the kubelet would kill jobs still in their grace period; leave it empty to get shutdown_grace + %ds" $n $grace (int .Values.terminationGraceMarginSeconds)) }}
{{- end }}
{{- $n }}
{{- end }}
{{- end }}

{{/* A secretKeyRef env entry. */}}
{{- define "switchyard.secretEnv" -}}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret | quote }}
      key: {{ .key | quote }}
{{- end }}

{{/*
switchyard.secretEnvs is the environment of the switchyard container's
secrets, every one a secretKeyRef: database, brokers, the default token,
the SASL password and each admin.tokens[].token_env.
*/}}
{{- define "switchyard.secretEnvs" -}}
{{- $s := .Values.secrets }}
{{- $secret := required "secrets.existingSecret: name the Secret that holds Switchyard's database URL, brokers and tokens (the chart never creates one)" $s.existingSecret }}
{{- include "switchyard.secretEnv" (dict "env" "SWITCHYARD_DATABASE_URL" "secret" $secret "key" (required "secrets.databaseURLKey: the key of the runtime Postgres URL" $s.databaseURLKey)) }}
{{ include "switchyard.secretEnv" (dict "env" "SWITCHYARD_KAFKA_BROKERS" "secret" $secret "key" (required "secrets.kafkaBrokersKey: the key of the Kafka brokers" $s.kafkaBrokersKey)) }}
{{- $tokens := list }}
{{- with .Values.config.admin }}{{ $tokens = default (list) .tokens }}{{ end }}
{{- if $s.adminTokenKey }}
{{ include "switchyard.secretEnv" (dict "env" "SWITCHYARD_ADMIN_TOKEN" "secret" $secret "key" $s.adminTokenKey) }}
{{- else if not $tokens }}
{{- fail "secrets.adminTokenKey is empty and config.admin.tokens has none: Switchyard listens on a pod address only with a token" }}
{{- end }}
{{- if $s.kafkaSASLPasswordKey }}
{{ include "switchyard.secretEnv" (dict "env" "SWITCHYARD_KAFKA_SASL_PASSWORD" "secret" $secret "key" $s.kafkaSASLPasswordKey) }}
{{- end }}
{{- range $i, $t := $tokens }}
{{- $ref := get (default (dict) $s.tokens) (toString $t.token_env) }}
{{- if not $ref }}
{{- fail (printf "config.admin.tokens[%d].token_env: %s has no entry in secrets.tokens: name the key (and secret, default %s) that holds it" $i $t.token_env $secret) }}
{{- end }}
{{ include "switchyard.secretEnv" (dict "env" $t.token_env "secret" (default $secret $ref.secret) "key" (required (printf "secrets.tokens.%s.key: the key that holds the token" $t.token_env) $ref.key)) }}
{{- end }}
{{- end }}

{{/* The variables whose values are secrets: refused in extraEnv. */}}
{{- define "switchyard.secretNames" -}}
{{- $names := list "SWITCHYARD_DATABASE_URL" "SWITCHYARD_KAFKA_BROKERS" "SWITCHYARD_ADMIN_TOKEN" "SWITCHYARD_KAFKA_SASL_PASSWORD" }}
{{- with .Values.config.admin }}{{ range .tokens }}{{ $names = append $names (toString .token_env) }}{{ end }}{{ end }}
{{- toJson $names }}
{{- end }}
