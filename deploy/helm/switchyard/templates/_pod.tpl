{{/*
switchyard.workload is the kind of the workload that runs `switchyard run`
(values: workload), after refusing what would hurt the consumer group:
static membership on a Deployment, and a fixed kafka.instance_id in the
config file that every replica shares.
*/}}
{{- define "switchyard.workload" -}}
{{- $kind := toString .Values.workload }}
{{- if not (has $kind (list "Deployment" "StatefulSet")) }}
{{- fail (printf "workload: %s: want Deployment or StatefulSet" $kind) }}
{{- end }}
{{- if and .Values.kafkaStaticMembership (ne $kind "StatefulSet") }}
{{- fail (printf "kafkaStaticMembership needs workload: StatefulSet (it is %s): a static member does not leave the group when it stops, and a %s's replacement pod has a new name, so the group would hold each old member's partitions unconsumed until kafka.session_timeout, at every rollout" $kind $kind) }}
{{- end }}
{{- with .Values.config.kafka }}
{{- if .instance_id }}
{{- fail "config.kafka.instance_id: every replica reads this file, and members with one id fence each other out of the group; use kafkaStaticMembership (workload: StatefulSet) for an id per pod" }}
{{- end }}
{{- end }}
{{- $kind }}
{{- end }}

{{/*
switchyard.extraVolumes and switchyard.extraVolumeMounts are the values of
those names, for the pods and the migration Job alike, after refusing what
would collide with the config's volume: its name, and its mount path
/etc/switchyard or a path under it (a read-only ConfigMap volume has no
room for another mount point).
*/}}
{{- define "switchyard.extraVolumes" -}}
{{- range .Values.extraVolumes }}
{{- if eq (toString .name) "config" }}
{{- fail "extraVolumes: config is the name of the volume of Switchyard's config file; name yours otherwise" }}
{{- end }}
{{- end }}
{{- with .Values.extraVolumes }}{{ toYaml . }}{{ end }}
{{- end }}

{{- define "switchyard.extraVolumeMounts" -}}
{{- range .Values.extraVolumeMounts }}
{{- $path := toString .mountPath }}
{{- if or (eq (trimSuffix "/" $path) "/etc/switchyard") (hasPrefix "/etc/switchyard/" $path) }}
{{- fail (printf "extraVolumeMounts: %s: /etc/switchyard holds the config file (a read-only ConfigMap volume); mount elsewhere, e.g. /etc/switchyard-tls" $path) }}
{{- end }}
{{- end }}
{{- with .Values.extraVolumeMounts }}{{ toYaml . }}{{ end }}
{{- end }}

{{/*
switchyard.podTemplate is the pods' template, the same for a Deployment
and a StatefulSet.
*/}}
{{- define "switchyard.podTemplate" -}}
{{- $secretNames := include "switchyard.secretNames" . | fromJsonArray }}
{{- range .Values.extraEnv }}
{{- if has .name $secretNames }}
{{- fail (printf "extraEnv: %s is a secret: name its Secret and key in secrets, never a value" .name) }}
{{- end }}
{{- end -}}
metadata:
  labels:
    {{- include "switchyard.labels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    # A config change rolls the pods: Switchyard reads its file at start.
    checksum/config: {{ include "switchyard.config" . | sha256sum }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "switchyard.serviceAccountName" . }}
  automountServiceAccountToken: {{ .Values.automountServiceAccountToken }}
  # config.shutdown_grace for in-flight jobs, then time to release the
  # rest's leases, store offsets and leave the group before SIGKILL.
  terminationGracePeriodSeconds: {{ include "switchyard.terminationGrace" . }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  containers:
    - name: switchyard
      image: {{ include "switchyard.image" . | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args: ["run", "--config", "/etc/switchyard/switchyard.yaml"]
      ports:
        - name: http
          containerPort: {{ include "switchyard.port" . }}
          protocol: TCP
      env:
        {{- include "switchyard.secretEnvs" . | nindent 8 }}
        {{- if .Values.kafkaStaticMembership }}
        # Static group membership under the pod's name, which a
        # StatefulSet's replacement pod keeps (switchyard.workload refuses
        # it elsewhere).
        - name: SWITCHYARD_KAFKA_INSTANCE_ID
          valueFrom:
            fieldRef: {fieldPath: metadata.name}
        {{- end }}
        {{- with .Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      livenessProbe:
        httpGet: {path: /healthz, port: http}
        {{- toYaml .Values.livenessProbe | nindent 8 }}
      readinessProbe:
        httpGet: {path: /readyz, port: http}
        {{- toYaml .Values.readinessProbe | nindent 8 }}
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      volumeMounts:
        - name: config
          mountPath: /etc/switchyard
          readOnly: true
        {{- with include "switchyard.extraVolumeMounts" . }}
        {{- . | nindent 8 }}
        {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ include "switchyard.fullname" . }}
    {{- with include "switchyard.extraVolumes" . }}
    {{- . | nindent 4 }}
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
