//! The CoreWeave Sandbox (formerly Aviato) wire: the messages of
//! `coreweave.sandbox.v1.SandboxService` that rlx's client and `rlx sandbox serve --protocol
//! cwsandbox` exchange, typed once with prost derive. Field numbers are those of the descriptors
//! shipped in the official client's wheel (`cwsandbox==1.22.0`, `cwsandbox/_proto/sandbox_pb2.py`);
//! fields rlx neither sends nor reads are left out (protobuf skips unknown fields both ways).

use std::collections::BTreeMap;

/// The gRPC service path prefix.
pub(crate) const SERVICE: &str = "/coreweave.sandbox.v1.SandboxService/";

/// `google.protobuf.Timestamp`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Timestamp {
    #[prost(int64, tag = "1")]
    pub(crate) seconds: i64,
    #[prost(int32, tag = "2")]
    pub(crate) nanos: i32,
}

impl Timestamp {
    pub(crate) fn now() -> Timestamp {
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Timestamp { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 }
    }
}

/// `State`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub(crate) enum State {
    Unspecified = 0,
    Creating = 1,
    Running = 2,
    Completed = 3,
    Failed = 4,
    Terminating = 5,
    Terminated = 6,
    Pending = 7,
    Paused = 8,
    Preparing = 9,
}

/// `Resources`: Kubernetes quantities (`"1"`, `"500m"`, `"1Gi"`).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Resources {
    #[prost(string, tag = "1")]
    pub(crate) cpu: String,
    #[prost(string, tag = "2")]
    pub(crate) memory: String,
}

/// `ResourceRequirements`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ResourceRequirements {
    #[prost(message, optional, tag = "1")]
    pub(crate) requests: Option<Resources>,
    #[prost(message, optional, tag = "2")]
    pub(crate) limits: Option<Resources>,
}

/// `Container`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Container {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(string, tag = "2")]
    pub(crate) image: String,
    #[prost(string, tag = "3")]
    pub(crate) command: String,
    #[prost(string, repeated, tag = "4")]
    pub(crate) args: Vec<String>,
    #[prost(btree_map = "string, string", tag = "5")]
    pub(crate) environment_variables: BTreeMap<String, String>,
    #[prost(message, optional, tag = "6")]
    pub(crate) resources: Option<Resources>,
    #[prost(string, tag = "10")]
    pub(crate) working_dir: String,
    #[prost(message, optional, tag = "11")]
    pub(crate) resource_requirements: Option<ResourceRequirements>,
}

/// `SandboxSpec`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SandboxSpec {
    #[prost(message, repeated, tag = "1")]
    pub(crate) containers: Vec<Container>,
    #[prost(int32, tag = "5")]
    pub(crate) max_lifetime_seconds: i32,
    #[prost(string, repeated, tag = "8")]
    pub(crate) tags: Vec<String>,
}

/// `SandboxStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SandboxStatus {
    #[prost(enumeration = "State", tag = "1")]
    pub(crate) state: i32,
    #[prost(string, tag = "2")]
    pub(crate) state_reason: String,
    #[prost(message, optional, tag = "3")]
    pub(crate) create_time: Option<Timestamp>,
    #[prost(message, optional, tag = "4")]
    pub(crate) start_time: Option<Timestamp>,
    #[prost(message, optional, tag = "5")]
    pub(crate) end_time: Option<Timestamp>,
    #[prost(int32, tag = "11")]
    pub(crate) effective_max_lifetime_seconds: i32,
}

/// `Sandbox`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Sandbox {
    #[prost(string, tag = "1")]
    pub(crate) sandbox_id: String,
    #[prost(message, optional, tag = "2")]
    pub(crate) spec: Option<SandboxSpec>,
    #[prost(message, optional, tag = "3")]
    pub(crate) status: Option<SandboxStatus>,
    #[prost(string, tag = "6")]
    pub(crate) display_name: String,
}

impl Sandbox {
    /// The state, `Unspecified` when missing.
    pub(crate) fn state(&self) -> State {
        self.status.as_ref().and_then(|s| State::try_from(s.state).ok()).unwrap_or(State::Unspecified)
    }
}

/// `CreateSandboxRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct CreateSandboxRequest {
    #[prost(message, optional, tag = "1")]
    pub(crate) sandbox: Option<Sandbox>,
    #[prost(string, tag = "2")]
    pub(crate) request_id: String,
}

/// `GetSandboxRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct GetSandboxRequest {
    #[prost(string, tag = "1")]
    pub(crate) sandbox_id: String,
}

/// `ListSandboxesRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ListSandboxesRequest {
    #[prost(int32, tag = "1")]
    pub(crate) page_size: i32,
    #[prost(string, tag = "2")]
    pub(crate) page_token: String,
    #[prost(string, repeated, tag = "3")]
    pub(crate) tags: Vec<String>,
    #[prost(enumeration = "State", tag = "4")]
    pub(crate) state: i32,
    #[prost(bool, tag = "5")]
    pub(crate) show_terminated: bool,
}

/// `ListSandboxesResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ListSandboxesResponse {
    #[prost(message, repeated, tag = "1")]
    pub(crate) sandboxes: Vec<Sandbox>,
    #[prost(string, tag = "2")]
    pub(crate) next_page_token: String,
}

/// `DeleteSandboxRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct DeleteSandboxRequest {
    #[prost(string, tag = "1")]
    pub(crate) sandbox_id: String,
    #[prost(int32, tag = "2")]
    pub(crate) grace_period_seconds: i32,
    #[prost(string, tag = "4")]
    pub(crate) request_id: String,
    #[prost(bool, tag = "5")]
    pub(crate) allow_missing: bool,
}

/// `DeleteSandboxResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct DeleteSandboxResponse {
    #[prost(message, optional, tag = "1")]
    pub(crate) sandbox: Option<Sandbox>,
}

/// `ExecRequest` (unary: no stdin; the deadline is the gRPC deadline).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ExecRequest {
    #[prost(string, tag = "1")]
    pub(crate) sandbox_id: String,
    #[prost(string, repeated, tag = "2")]
    pub(crate) command: Vec<String>,
    #[prost(btree_map = "string, string", tag = "3")]
    pub(crate) env: BTreeMap<String, String>,
    #[prost(int32, tag = "4")]
    pub(crate) max_output_bytes: i32,
    #[prost(string, tag = "5")]
    pub(crate) container: String,
}

/// `ExecResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ExecResponse {
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) stdout: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub(crate) stderr: Vec<u8>,
    #[prost(int32, tag = "3")]
    pub(crate) exit_code: i32,
    #[prost(bool, tag = "4")]
    pub(crate) stdout_truncated: bool,
    #[prost(bool, tag = "5")]
    pub(crate) stderr_truncated: bool,
}

/// `ExecStreamInit`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ExecStreamInit {
    #[prost(string, tag = "1")]
    pub(crate) sandbox_id: String,
    #[prost(string, repeated, tag = "2")]
    pub(crate) command: Vec<String>,
    #[prost(bool, tag = "3")]
    pub(crate) tty: bool,
    #[prost(btree_map = "string, string", tag = "6")]
    pub(crate) env: BTreeMap<String, String>,
    #[prost(string, tag = "7")]
    pub(crate) container: String,
}

/// `ExecStreamClose` (stdin EOF).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ExecStreamClose {}

/// `ExecStreamRequest.message`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum StreamRequest {
    #[prost(message, tag = "1")]
    Init(ExecStreamInit),
    #[prost(bytes, tag = "2")]
    Stdin(Vec<u8>),
    #[prost(message, tag = "4")]
    Close(ExecStreamClose),
}

/// `ExecStreamRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ExecStreamRequest {
    #[prost(oneof = "StreamRequest", tags = "1, 2, 4")]
    pub(crate) message: Option<StreamRequest>,
}

/// `ExecStreamReady`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ExecStreamReady {
    #[prost(message, optional, tag = "1")]
    pub(crate) ready_time: Option<Timestamp>,
}

/// `ExecStreamOutput` (`stream`: 1 stdout, 2 stderr).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ExecStreamOutput {
    #[prost(int32, tag = "1")]
    pub(crate) stream: i32,
    #[prost(bytes = "vec", tag = "2")]
    pub(crate) data: Vec<u8>,
}

/// `ExecStreamExit`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ExecStreamExit {
    #[prost(int32, tag = "1")]
    pub(crate) exit_code: i32,
    #[prost(message, optional, tag = "2")]
    pub(crate) completed_time: Option<Timestamp>,
}

/// `ExecStreamError`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ExecStreamError {
    #[prost(string, tag = "1")]
    pub(crate) message: String,
    #[prost(string, tag = "2")]
    pub(crate) code: String,
}

/// `ExecStreamResponse.message`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum StreamResponse {
    #[prost(message, tag = "1")]
    Ready(ExecStreamReady),
    #[prost(message, tag = "2")]
    Output(ExecStreamOutput),
    #[prost(message, tag = "3")]
    Exit(ExecStreamExit),
    #[prost(message, tag = "4")]
    Error(ExecStreamError),
}

/// `ExecStreamResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ExecStreamResponse {
    #[prost(oneof = "StreamResponse", tags = "1, 2, 3, 4")]
    pub(crate) message: Option<StreamResponse>,
}

/// `WriteFileRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct WriteFileRequest {
    #[prost(string, tag = "1")]
    pub(crate) sandbox_id: String,
    #[prost(string, tag = "2")]
    pub(crate) path: String,
    #[prost(bytes = "vec", tag = "3")]
    pub(crate) content: Vec<u8>,
    #[prost(string, tag = "4")]
    pub(crate) container: String,
}

/// `WriteFileResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct WriteFileResponse {}

/// `ReadFileRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ReadFileRequest {
    #[prost(string, tag = "1")]
    pub(crate) sandbox_id: String,
    #[prost(string, tag = "2")]
    pub(crate) path: String,
    #[prost(string, tag = "3")]
    pub(crate) container: String,
}

/// `ReadFileResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ReadFileResponse {
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) content: Vec<u8>,
}
