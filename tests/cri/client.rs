//! A CRI client as the kubelet is one: the runtime.v1 gRPC services of
//! k8s-cri (tonic) over containerd's Unix socket, each call blocking with
//! a deadline, so a hung daemon fails the test instead of stalling it.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::{Channel, Endpoint, Uri};

/// How long one CRI call may take before the test fails.
const CALL_DEADLINE: Duration = Duration::from_secs(60);

pub struct Cri {
    rt: tokio::runtime::Runtime,
    channel: Channel,
}

impl Cri {
    /// A channel to the CRI socket `sock` (connected lazily, at the first
    /// call, as the kubelet's).
    pub fn new(sock: &Path) -> Cri {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let sock: PathBuf = sock.to_path_buf();
        let channel = {
            let _guard = rt.enter();
            // The URI is a placeholder: the connector dials the socket.
            Endpoint::from_static("http://[::1]:50051")
                .connect_timeout(Duration::from_secs(5))
                .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                    let sock = sock.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(
                            tokio::net::UnixStream::connect(sock).await?,
                        ))
                    }
                }))
        };
        Cri { rt, channel }
    }

    /// One call of the RuntimeService: `call(client)` → its message, or
    /// the gRPC status (or the deadline) as an error line naming `what`.
    pub fn runtime<T, F>(
        &self,
        what: &str,
        call: impl FnOnce(RuntimeServiceClient<Channel>) -> F,
    ) -> Result<T, String>
    where
        F: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let client = RuntimeServiceClient::new(self.channel.clone());
        self.block(what, call(client))
    }

    /// One call of the ImageService, as [`Cri::runtime`].
    pub fn images<T, F>(
        &self,
        what: &str,
        call: impl FnOnce(ImageServiceClient<Channel>) -> F,
    ) -> Result<T, String>
    where
        F: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let client = ImageServiceClient::new(self.channel.clone());
        self.block(what, call(client))
    }

    fn block<T>(
        &self,
        what: &str,
        f: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, String> {
        // The deadline's timer is made inside the runtime.
        match self
            .rt
            .block_on(async { tokio::time::timeout(CALL_DEADLINE, f).await })
        {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(status)) => Err(format!(
                "CRI {what}: {:?}: {}",
                status.code(),
                status.message()
            )),
            Err(_) => Err(format!("CRI {what}: no answer within {CALL_DEADLINE:?}")),
        }
    }
}
