"""Lines for the redaction tests. Every value is fabricated: right prefix, length and charset.

A positive line marks each secret with guillemets, «like this»: the input is the line
without the marks, and the expected output has each marked part replaced by [REDACTED].
A negative line must come out unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_MARKED = re.compile(r"«(.*?)»", re.DOTALL)

# Fabricated key material, reused where a line needs a PEM body.
_B64_LINES = (
    "82YTyr+n/dryG4cBIRlNmbh+/3UHdgBDJppkFFEZciCQP00U87juJUBEoAXHmGRZ",
    "2XsTS5MivpF9k9jz89iLWeajzV6xuRXLAsfmhVwlva/byCSEsWAGU0g47kCxhG4r",
    "S2A5e7sAuPFJiN7UZpjxV2KKrgnfHCzbt5G7+eSeiOJcT/HHqodEvUF0f+UzpWcP",
    "1mLMwT3zWLA825gFKEOU0Ekm5h+Kt9sbg9bAjtbDV3J7Y59r5zFa1lykVg5kpYYr",
)
_PEM_BODY = "\n".join(_B64_LINES)
_PEM_BODY_ESCAPED = "\\n".join(_B64_LINES)  # as inside a JSON string: a literal backslash-n


@dataclass(frozen=True)
class Positive:
    id: str
    marked: str

    @property
    def text(self) -> str:
        return _MARKED.sub(r"\1", self.marked)

    @property
    def expected(self) -> str:
        return _MARKED.sub("[REDACTED]", self.marked)

    @property
    def secrets(self) -> list[str]:
        return _MARKED.findall(self.marked)


POSITIVES = [
    # Private keys
    Positive(
        "pem-rsa",
        "key.pem:\n-----BEGIN RSA PRIVATE KEY-----\n«" + _PEM_BODY + "»\n"
        "-----END RSA PRIVATE KEY-----\nsaved.",
    ),
    Positive(
        "pem-openssh",
        "-----BEGIN OPENSSH PRIVATE KEY-----\r\n«" + _PEM_BODY.replace("\n", "\r\n") + "»\r\n"
        "-----END OPENSSH PRIVATE KEY-----",
    ),
    Positive(
        "pem-json-escaped",
        '{"tool_output": "-----BEGIN PRIVATE KEY-----\\n«' + _PEM_BODY_ESCAPED + "»\\n"
        '-----END PRIVATE KEY-----\\n", "exit": 0}',
    ),
    Positive(
        "pem-encrypted-legacy",
        "-----BEGIN EC PRIVATE KEY-----\n«Proc-Type: 4,ENCRYPTED\n"
        "DEK-Info: AES-128-CBC,3F17F5316E2BAC89\n\n"
        + _PEM_BODY
        + "»\n-----END EC PRIVATE KEY-----",
    ),
    Positive(
        "pem-pgp-block",
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n«" + _PEM_BODY + "\n=Xk4q»\n"
        "-----END PGP PRIVATE KEY BLOCK-----",
    ),
    Positive(
        "pem-truncated",
        "$ cat id_ed25519\n-----BEGIN OPENSSH PRIVATE KEY-----\n«"
        + "\n".join(_B64_LINES[:2])
        + "»\n(output truncated)",
    ),
    # Vendor tokens
    Positive(
        "openai-legacy", "client = OpenAI(«sk-M0XvqZjxTW3xvboSRt5Mh3dAwVtRMflhbmuaptt0Azn0DNRU»)"
    ),
    Positive(
        "openai-project",
        "Using key «sk-proj-V0FhHVJWDBt2hWdQZUm14QhoxhLPAbQcEFUV2fsjGHb6HrlEOS47WgjKCu-0xxKhg5Qj"
        "WV1mKaT3BlbkUyvBPs0jSO2Jkf08MMF1ulMMCw3XVy27dFanUrOSE62chn4xdeJg1Kza5KxxGWfvmaQtKnP-VS»"
        " for the run",
    ),
    Positive(
        "anthropic",
        "anthropic.Anthropic(api_key=«sk-ant-api03-GVBrYSuIb9OZiFZ3HLKv797TPNbpjava1bMZwIMlvdp5gjT"
        "rD8Osj-LnZ5R_j-8U-m7aSz7NRSOtv75y4SXvE9rwLbAtfAA»)",
    ),
    Positive("github-ghp", "remote: token «ghp_6LZQ9SMDcEVV8bOhUVXoqmaQzE4ftUvXQICh» accepted"),
    Positive("github-gho", "oauth «gho_PnlnhG2BqxLHmAuMe57l9JuO4iIhOvqiZnCx» expires soon"),
    Positive("github-ghu", "[«ghu_h1Gd1CJoWD6W7vjmqz6mYjWc7izH9DsTNAve»]"),
    Positive("github-ghs", "installation token: «ghs_adCL8Sby90WIJSbUGWBOWWcuaA5zbWVb2FaC»"),
    Positive("github-ghr", "refresh=«ghr_o7du45pKcP753ivdSmDrUd7z14cKuuBNf0gm»;"),
    Positive(
        "github-fine-grained",
        "gh auth login with «github_pat_UBUhWRQdIAUDFbxtBetshR_QNG3dhi4wVnX558GkvxThvA0EhexWQ3czyr"
        "EvmkXbI8P0GwAESV5nkthBGJ» done",
    ),
    Positive("gitlab", "git clone with glpat «glpat-gUAeSsUfFgUl8oPK_HJN» worked"),
    Positive("aws-access-key-id", "Found AccessKeyId «AKIA44U7PO54BTVIJSM4» in the logs"),
    Positive("aws-session-key-id", "sts returned «ASIAA52OU6Y5VVQM3ZH7» (temporary)"),
    Positive(
        "aws-secret-env", "export AWS_SECRET_ACCESS_KEY=«ptzsJqLOJqu3g9DYpQaxEN/cNljiRkV71kDRuIr2»"
    ),
    Positive(
        "aws-secret-prose",
        "AWS secret key «jhTxs/OHKDpnJh+rgiOaPq+N9RtlnnudSkpmKog0» belongs to ci-bot",
    ),
    Positive(
        "aws-credentials-csv",
        "ci-bot,«AKIA44U7PO54BTVIJSM4»,«ptzsJqLOJqu3g9DYpQaxEN/cNljiRkV71kDRuIr2»,2024-06-01",
    ),
    Positive(
        "slack-bot",
        "SLACK_BOT=«xoxb-521720509597-2169023705690-j8KVuxgaaJl7LRiiQbLJmWZT» # ops channel",
    ),
    Positive(
        "slack-user",
        "token «xoxp-446414899844-703089255388-5358791617918-425ba9682170905f4ec5a399fc47f5ed» ok",
    ),
    Positive(
        "slack-webhook",
        "POST https://hooks.slack.com/services/«TWV17VKDJ2F/BRPX87VBLJO/msx29WujczU9YGP6SxWw4iUi»",
    ),
    Positive(
        "discord-webhook",
        "webhook https://discord.com/api/webhooks/804615188809533081/«coP95wL0rKA53zmg7srxirfu19Ac"
        "-kKd2Lq1D595WXjjOt6v3rzKE4RNo88yLVvlwEpg» set",
    ),
    Positive(
        "stripe-live",
        "stripe.api_key = «sk_live_E6LapkRgRsaITgqLpaKoJceXBH42IkQFU960mNhJuAPXOEGvgUsWlY8A1myEV»",
    ),
    Positive("stripe-restricted", "restricted key «rk_live_4ywWylEHwUwlCyxtq7g5HwjW» rotated"),
    Positive("stripe-test", "use «sk_test_cbSDS5mZGF2Hlr7PNBC159tw» in staging"),
    Positive("stripe-webhook", "endpoint secret «whsec_sB09lmZYcZt7dC9HVfrRz3eKFIfNhqrW»."),
    Positive("google-api", "maps?key=«AIza3Yhc1OxT-8QY4-3BMDogiSTRIiP9LJm7R04»&q=Paris"),
    Positive("google-oauth-secret", "client «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» from console"),
    Positive(
        "google-access-token",
        "gcloud printed «ya29._5SApYXfE-1ds3vbgqMMvFuz4zf3ATNeY2Pseh093Fj9fOptqCWCsuZrJZaVLaPe"
        "AU5mo»",
    ),
    Positive(
        "npm-npmrc",
        "//registry.npmjs.org/:_authToken=«npm_NaXVKtYLRV1ipLUYykCwvVbI2fcZpddioUgI»",
    ),
    Positive(
        "huggingface", "huggingface-cli login --token «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»"
    ),
    Positive(
        "sendgrid",
        "mail via «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» failed",
    ),
    Positive("twilio-api-key", "twilio api key «SKd9f9b9f5f9707d5bbd933e4a241d6509» created"),
    Positive(
        "pypi",
        "twine upload -p «pypi-AgEIcHlwaS5vcmcL66YbgqaD7XBPgUbqr2RbwXOq43IedbtWe27WH77hBlyqz-9P"
        "NldsWhXK64VtGHZA2PQLU» dist/*",
    ),
    Positive(
        "digitalocean",
        "doctl auth init -t «dop_v1_7fcd3ce2818f26ff6bff254199c973226b722641b0e812e92776e2051"
        "ccb9b2b»",
    ),
    Positive("shopify", "shop token «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» for the store"),
    Positive(
        "signet",
        "SIGNET_URL=http://127.0.0.1:8000 «sig_P5S_KXv5Zzjhe3p1g1aKfux6fX1L3dd4u2dDGqt1NvV»",
    ),
    # JWTs and HTTP credentials
    Positive(
        "jwt",
        "id_jwt «eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VyLTQ4MjEiLCJpYXQiOjE3MTgwMDAw"
        "MDB9.XkOKKjOwTTozqvCnAKjsmvnwK24pD8eg5NwFD2D0wQS» decoded",
    ),
    Positive(
        "authorization-bearer",
        "curl -H 'Authorization: Bearer «nR74KLO10yZ2ChVIHNaQzlMKYdILjCZO4uEHrIxd»' https://api.test",
    ),
    Positive("authorization-basic", "Authorization: Basic «ZGVwbG95Okh0TldhRU5IeGVsaVo5»"),
    Positive(
        "authorization-token",
        '-H "Authorization: token «Qm9vc3RlcjpQYXNzd29yZDEyMw»" -X POST',
    ),
    Positive(
        "authorization-dict",
        'headers = {"Authorization": "Bearer «f4Kx92LmQz7TnR0pWv3YbE6u»", "Accept": "*/*"}',
    ),
    Positive("proxy-authorization", "Proxy-Authorization: Basic «cHJveHk6UHIweHlQYXNz»"),
    Positive(
        "bearer-log-line",
        "2024-06-11T10:02:03Z DEBUG sending bearer «b7Kq2Zp9Lm4Xw8Rt1Vn6» to upstream",
    ),
    Positive(
        "cookie-header",
        "> Cookie: «sessionid=k29fj3LmQp81zX; csrftoken=Zr7Yq2mB9xK4»\n> Accept: */*",
    ),
    # Credentials in URLs and command lines
    Positive("url-postgres", "DATABASE_URL=postgres://app:«Sup3rS3cret»@db.internal:5432/app"),
    Positive("url-redis-no-user", "REDIS_URL=redis://:«Redis-Pa55w0rd»@cache:6379/0"),
    Positive(
        "url-mongodb-srv",
        "mongodb+srv://reporter:«m0ng0Pw-71x»@cluster0.ab1cd.mongodb.net/db?retryWrites=true",
    ),
    Positive(
        "url-git-token",
        "git clone https://x-access-token:«ghs_adCL8Sby90WIJSbUGWBOWWcuaA5zbWVb2FaC»@github.com/o/r.git",
    ),
    Positive("url-amqp", "broker amqp://guest:«Rabb1t-Mq-pw»@rabbit:5672// reachable"),
    Positive("curl-u", "curl -u admin:«Adm1nPass» https://jenkins.local/api/json"),
    Positive("curl-user-quoted", 'curl -s --user "deploy:«D3ploy!key»" -X POST https://ci.local'),
    # key=value forms
    Positive("env-db-password", "DB_PASSWORD=«hunter2!x»"),
    Positive("env-quoted-secret-key", "SECRET_KEY='«django-insecure-8f#k2l$zq@1v!m3p»'"),
    Positive("env-github-token", "export GITHUB_TOKEN=«Zx8q1Lm2Nv3Bc4Xz5Aq6»  # for gh"),
    Positive("yaml-password", "  password: «s3cr3t-Pa55»\n  user: app"),
    Positive("json-client-secret", '{"client_id": "web-42", "client_secret": "«Ct9-qLz0Ymv4Rr»"}'),
    Positive("json-escaped-api-key", '{\\"api_key\\": \\"«abc123def456ghi»\\", \\"n\\": 1}'),
    Positive("python-api-key", 'OPENAI_KEY = None\nAPI_KEY = "«4f9Tz1Qm7Lx0Vb2N»"'),
    Positive("go-walrus-token", 'token := "«tK9mQ2xZ7pL4»"'),
    Positive("php-arrow-password", "'password' => '«p4ss-Word-99»',"),
    Positive("cli-flag-equals", "wget --http-password=«W9etPass7» https://files.local/a.tgz"),
    Positive("cli-flag-space", "vault login --token «Vt8n2Kq9Xm1z» -address=https://vault:8200"),
    Positive("query-string-token", "GET /reset?email=a@b.c&access_token=«Qz81kLm0pX»&next=/home"),
    Positive("xml-password", "<server><id>nexus</id><password>«N3xus!pw»</password></server>"),
    Positive("java-properties", "spring.datasource.password=«Spr1ngPw#42»"),
    Positive("camel-case-key", '{"accessToken": "«aT0k-9Zx2Lq»", "expiresIn": 3600}'),
    Positive("header-api-key", "X-Api-Key: «7c1eF9a2Bd4»"),
    Positive("aws-session-token-env", "AWS_SESSION_TOKEN=«FwoGZXIvYXdzEBYaDH7xK2+mQ9/Lp0Z»"),
    Positive("docker-auth", '{"auths": {"ghcr.io": {"auth": "«Ym90OmdocF9hYmMxMjM0NQ==»"}}}'),
    # Prose
    Positive("prose-password-is", "The password is «hunter2». Don't share it."),
    Positive("prose-my-token-is", "my token is «Zq81-aa93-Lk2» if you need it"),
    Positive("prose-api-key-was-quoted", "The API key was `«kx9Lm2»` until Monday."),
    Positive("prose-password-set-to", "DB password is set to «Tr0ub4dor&3» now"),
    # Lowercasing "İ" adds a code point; offsets must not shift.
    Positive("non-ascii-before", "İstanbul şubesi: DB_PASSWORD=«hunter2!x» (staging)"),
    # A URL cut short on the line before is not the key's URL.
    Positive("key-after-bare-scheme", "fetch https://\ntoken: «Zx8q1Lm2Nv3Bc4»"),
    # A rejected value (here a template) does not hide a secret further in.
    Positive("secret-inside-placeholder", 'token="${A} password=«Zq7-k1x»"'),
    # A keyword, whitespace, then the value: no "=" or ":" to go by
    Positive("keyword-with-secret", "Signed the callback with secret «Gh7kL2mQ9xZ4» and retried"),
    Positive(
        "keyword-and-password", "Log in as deploy and password «Tr0ub4dor&3» to reach the console"
    ),
    Positive(
        "keyword-secret-access-key",
        "SecretAccessKey «d7zVkEaGzb4Gcn1hG8OChJqMexTZaMmdO4F1P+SZ», SessionToken expired",
    ),
    Positive("keyword-dockerfile-env", "ENV DB_PASSWORD «Sup3r-S3cret!»"),
    Positive("keyword-passphrase-quoted", "unlock it with passphrase `«mX7#pQ2v-Lk»` first"),
    Positive("keyword-password-year", "the vpn password «Welcome2024!» was never rotated"),
    Positive(
        "keyword-json-escaped", '{"prompt": "deploy with secret «Gh7kL2mQ9xZ4»\\nthen restart"}'
    ),
    # Inside Markdown emphasis the closing marks are not the value's, but the value still goes.
    Positive("keyword-in-bold", "rotated: **with secret «Gh7kL2mQ9xZ4!»**, then restarted"),
    Positive(
        "keyword-colon-markdown",
        "- secret: «hunter2»\n- **Scanning**: with secret «Zx8q1Lm2Nv3Bc4»",
    ),
    Positive(
        "prose-passphrase-for-the-key", "the passphrase for the key is «Blue-Horse-Battery-9»"
    ),
    Positive(
        "prose-password-for-prod-db", "FYI the password for the prod db is «Pr0dDb!2024», rotate it"
    ),
    Positive("prose-pw-is", "pw is «k9Lm2Qx7» for the staging box"),
    Positive("prose-credentials-are", "the credentials are deploy:«Dpl0y-S3cret» (read-only)"),
    Positive("user-slash-password", "Log into Grafana with admin / «Gr4f4na!x» and change it"),
    Positive(
        "user-slash-password-email", "Sign in as ops@acme.io / «W0nderL@nd-42» on the console"
    ),
    # A long hex or base64 value right after secret, token, key or webhook
    Positive(
        "hex-after-webhook-secret",
        "GitHub webhook secret «eb8450ae2a1c5ed5571342c3967d286c» saved in the repo settings",
    ),
    Positive(
        "hex-after-token",
        "INFO auth ok, token «8a160d1cf407d30366a02402f6d2c62451184813» issued to ci",
    ),
    Positive(
        "base64-after-signing-key",
        "signing key «MAibwC4VEAdan3iMiXkGtMYTVRXIUgJ29HKXJvli/Ho=» loaded",
    ),
    Positive(
        "base64-after-key", "the new key «1SMb5FmrO3PHITH3OBscDR4T8KX5FV8a» goes in the vault"
    ),
    Positive(
        "hex-after-webhook", "registered webhook «f842932de4c58fb31845257065fec25f» for push events"
    ),
    # Command-line credentials
    Positive("docker-login-p", "docker login -u ci-bot -p «Dk8!pQ2zLm» registry.acme.io"),
    Positive(
        "podman-login-continued",
        "podman login registry.acme.io \\\n  --username ci \\\n  -p «Pd9-mQ4xZr»",
    ),
    Positive("mysql-attached", "mysql -h db.internal -u app -p«My5ql-Pw» app < dump.sql"),
    Positive("mysqldump-quoted", "mysqldump -uroot -p'«R00t!dump»' --all-databases > all.sql"),
    Positive("sshpass", "sshpass -p '«Ss4!pass»' ssh root@10.0.0.5 uptime"),
    Positive("sshpass-attached", "sshpass -p«Tm9pY2Ux» scp backup.tgz deploy@bastion:"),
    Positive("curl-su-combined", "curl -su admin:«Adm1n-Pa55» https://jenkins.local/api/json"),
    Positive("curl-empty-user", "curl -u :«Tk9-pQ2xLm7v» https://gitea.local/api/v1/user"),
    Positive("curl-shell-user", 'curl -u "$API_USER:«Xk2!mQ9-Lp»" https://api.local'),
    Positive("netrc-one-line", "machine api.heroku.com login me@acme.io password «0f1e2d3c-Hk9z»"),
    Positive("netrc-lines", "machine github.com\n  login octocat\n  password «Oct0-cat!Pw»\n"),
    Positive("netrc-default", "default login anonymous password «An0n-Pw!x»"),
    # Vendor formats
    Positive("telegram-bot", "bot = Bot(«406768130:AAHbOfltQumZYXrTTIzPXxwvbNcJ92lIKs5»)"),
    Positive(
        "telegram-api-url",
        "GET https://api.telegram.org/bot«829922364:AADwQsSgJSdxm6rRAr2Bz2bgT-VhVZ73ymv»/getMe",
    ),
    Positive(
        "discord-bot",
        "client.run('«Nzc3MjY0MTgwMDQ3MzM1NTU1.kTHF8x.bQCwdhzRKqQMYejZF67fOwszWtWeYrK19xm-HG»')",
    ),
    Positive(
        "discord-bot-newer",
        "leaked «MTcwNjM1Mjk5ODg3MDI5NTY3NQ.Sbzh7N.nAbz7pGNLCbw1IVSPudrAlgAcH4»",
    ),
    Positive(
        "aws-configure-prompt",
        "AWS Secret Access Key [None]: «3AkJM7764XxQZhPlvOdyBUrkR5XBQjc18DPm7aKA»",
    ),
    Positive(
        "hex-private-key-0x",
        "import wallet «0xc751b2b3be6c60ca0d367e8a299310cdfb72d73cbb49580158534011e6c90b94» "
        "into MetaMask",
    ),
    Positive(
        "hex-private-key-flag",
        "forge script Deploy --private-key «0xf842932de4c58fb31845257065fec25f820d929274"
        "33fe1f10b7e7bf7121dd22» --broadcast",
    ),
    Positive("url-password-hash", "DATABASE_URL=postgres://app:«pa#ss-W0rd»@db.internal:5432/app"),
    Positive("url-password-hash-redis", "REDIS_URL=redis://:«r3d#1s!Pw»@cache:6379/0"),
]

NEGATIVES = {
    "git-sha": "commit 3f786850e387550fdab836ed7e6dc881de23001b (HEAD -> main, origin/main)",
    "git-short-sha-log": "a1b2c3d Fix token refresh when the session expires",
    "uuid": "session 0b6f3f0e-8f5c-4d7e-9b61-1f2a3c4d5e6f resumed from checkpoint 42",
    "sha256-digest": (
        "ghcr.io/acme/api@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    ),
    "paths": "Edited src/auth/password_reset_view.py and tests/test_token_store.py",
    "secret-file-path": "private_key: ~/.ssh/id_ed25519\npassword_file: /run/secrets/db_password",
    "env-var-placeholders": (
        "API_KEY=${API_KEY}\nDB_PASSWORD=$DB_PASSWORD\nTOKEN=${{ secrets.TOKEN }}"
    ),
    "angle-placeholder": 'curl -H "Authorization: Bearer <token>" https://api.test/v1/me',
    "shell-var-header": 'curl -H "Authorization: Bearer $TOKEN" https://api.test/v1/me',
    "your-key-here": "OPENAI_API_KEY=your_api_key_here",
    "masked-values": 'password=xxx\nsecret: "***"\ntoken: ********\npassword=changeme',
    "already-redacted": 'token: [REDACTED]\n{"password": "[REDACTED]"}\nthe password is [REDACTED]',
    "empty-values": 'password=\n{"api_key": "", "secret": \'\'}',
    "environ-reference": 'password = os.environ["DB_PASSWORD"]\ntoken = os.getenv("GITHUB_TOKEN")',
    "settings-reference": "api_key = settings.OPENAI_API_KEY\nsecret = self.secret",
    "type-annotations": "def login(password: str, token: Optional[str] = None) -> bool:",
    "kwargs-passthrough": "client = Client(api_key=api_key, token=token, password=password)",
    "code-branch": "if not token: raise PermissionDenied\npassword = get_password()",
    "password-reset-view": "path('reset/', password_reset_view, name='password_reset')",
    "token-count": "token count: 1234 (max_tokens: 4096, input_tokens: 12)",
    "prose-about-tokens": (
        "The password is stored in the keychain and the token is valid for an hour."
    ),
    "bearer-prose": "Use a bearer token for the API; Bearer tokens expire after an hour.",
    "cli-flag-prose": "Pass the --token flag or the --password-stdin option to docker login.",
    "url-without-credentials": "See https://docs.example.com:8443/guide/auth?tab=tokens#setup",
    "git-ssh-urls": "git@github.com:acme/repo.git and ssh://git@gitlab.com:2222/acme/repo.git",
    "ipv6-url": "http://[::1]:8000/api/hooks/claude/ answered 200",
    "docker-user": "docker run -u 1000:1000 alpine id && git push -u origin main",
    "data-uri": "src=data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAA",
    "python-identifiers": (
        "from sklearn import tokenize; tokenizer = AutoTokenizer.from_pretrained(m)"
    ),
    "status-words": "auth: ok\ntoken: expired\nsecret: true",
    "markdown-field-doc": "- `token`: the API token shown once at creation",
    "short-number-values": "token: 0\npassword_min_length: 12",
    "kwarg-words": "return AdminLogin(username=username, password=shown, created=created)",
    "type-class-annotation": "def make_rev_args(password: HiddenText | None = None) -> Args:",
    "fstring-auth-header": 'client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(u)}")',
    "format-string": "sql = 'ALTER USER %(user)s IDENTIFIED BY \"%(password)s\"'",
    "code-assignments": "token = Name\nself._credentials = kwargs\n_TOKEN_RE = re.compile(pattern)",
    "hex-digest-near-aws": "aws s3 cp out.tgz s3://bucket/ # etag 5d41402abc4b2a76b9719d911017c592",
    # Keywords in ordinary prose, with no value after them
    "prose-field-required": "The password field is required; the token field is optional.",
    "prose-rotate-the-key": "Rotate the key before Friday, then revoke the old token.",
    "prose-token-bucket": "The throttle is a token bucket: 10 tokens per second, burst 20.",
    "prose-primary-key": "Add a primary key on (id); a foreign key user_id references users(id).",
    "prose-secret-to": "The secret to fast tests is fixtures, and the key insight is caching.",
    "prose-password-for-is": (
        "The password for the admin account is stored in 1Password, not in the repo."
    ),
    "prose-token-for-each": (
        "The token for each request is generated by the server and expires in 5 minutes."
    ),
    "prose-credentials-are": "Credentials are loaded from the env; pw is short for password.",
    "prose-keyword-then-name": (
        "Pass the token OAuth2Session returns to the password hasher Argon2PasswordHasher."
    ),
    "prose-quoted-words": 'Click "Reset password" and paste the token "from your email".',
    "prose-secret-santa": "Secret Santa: the key to the office is with Alice; token ring topology.",
    # A bold label is a heading, not a keyword and its value.
    "markdown-bold-label": (
        "**Secret Scanning**: on for every repository; __Token Budget__: 2,000 characters"
    ),
    # Code that names secrets
    "code-go-struct": "type Creds struct {\n\tSecretAccessKey string\n\tToken *oauth2.Token\n}",
    "code-go-struct-json": (
        '{"output": "type Creds struct {\\n\\tSecretAccessKey string\\n\\tToken *oauth2.Token\\n}"}'
    ),
    "code-sql-ddl": (
        "CREATE TABLE users (password VARCHAR(128) NOT NULL, api_token CHAR(40) UNIQUE);"
    ),
    "code-shell-export": "export SIGNET_TOKEN SIGNET_OUTBOX=$outbox",
    "code-dockerfile-file": "ENV DB_PASSWORD_FILE /run/secrets/db_password",
    "code-pwd": "$ pwd\n/srv/app\n$ pwd && ls",
    # Hex, UUIDs and base64 that are data: after a data-ish key, or not next to a keyword
    "cache-key-hex": "cache key 5d41402abc4b2a76b9719d911017c592 hit, idempotency key reused",
    "idempotency-key-uuid": "idempotency key 0b6f3f0e-8f5c-4d7e-9b61-1f2a3c4d5e6f reused",
    "ssh-public-key": (
        "public key AAAAC3NzaC1lZDI1NTE5AAAAIGb3Q4fXm9kL2pW7vR8sT1uY6zA0cE5hJ3nB4dF ci@acme"
    ),
    "sha-near-token": "token refresh fix landed in 8a160d1cf407d30366a02402f6d2c62451184813",
    "ethereum-tx-hash": (
        "tx 0x5c504ed432cb51138bcf09aa5e8a410dd4a1e204ef84bfed1be16dfba1b22060 confirmed"
    ),
    "ethereum-block-hash": (
        '"blockHash": "0x88df016429689c079f3b2f6ad39fa052532c56795b733da78a91ebe6a713944b",'
    ),
    "ethereum-address": "sent 1 ETH to 0x742d35Cc6634C0532925a3b844Bc454e4438f44e",
    "solidity-slot": (
        "bytes32 internal constant _IMPLEMENTATION_SLOT = "
        "0x360894a13ba1a3210667c828492db98dca3e2076cc3735a920a3ca505d382bbc;"
    ),
    "colon-numbers": "12:30:45 elapsed, ratio 123456789:42, build 2024.06.11",
    # Command lines without a credential
    "cli-ports-and-dirs": "docker run -p 8080:80 app && mkdir -p build && ssh -p 2222 deploy@host",
    "docker-login-stdin": "echo $CR_PAT | docker login ghcr.io -u octocat --password-stdin",
    "mysql-prompt": "mysql -u root -p mydb < dump.sql   # prompts for the password",
    "netrc-words-in-prose": "The machine learning demo uses the default login page.",
    # Slashes that are not user / password
    "breadcrumbs": "Settings / Security / Passwords, and admin / users / Groups",
    "division": "rate = total_tokens / elapsed_seconds2 and login / Dashboard2",
    "url-fragments": "https://docs.acme.io/guide#install and git@github.com:acme/repo.git#main",
}
