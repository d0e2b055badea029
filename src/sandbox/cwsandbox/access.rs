//! Who may do what on `rlx sandbox serve --protocol cwsandbox`: the server's key, the principal
//! a request speaks for (each sandbox belongs to the credential that created it), and the images
//! the server can provide.
//!
//! Why sandboxes belong to the credential and not to the connection: the official client opens
//! a new channel whenever it likes, and a grader's sandboxes outlive any one connection; the
//! credential is what a client keeps. With a server key every client holding it is one
//! principal; without one (a loopback bind), each bearer token is its own.

use hyper::HeaderMap;

use super::grpc::{self, Status};

/// The server's API key: the one key type of every rlx server (never empty, compared in constant
/// time), re-exported so a library user can start this server with a key.
pub use crate::http_server::ApiKey;

/// The credential a request carries: `authorization: Bearer K` (the official client with
/// `CWSANDBOX_API_KEY`), `x-api-key: K`, or `x-wandb-api-key: K` (with `x-entity-id`).
fn credential(headers: &HeaderMap) -> Option<(&'static str, Vec<u8>, Vec<u8>)> {
    let get = |k: &str| headers.get(k).map(|v| v.as_bytes().trim_ascii().to_vec()).filter(|v| !v.is_empty());
    if let Some(v) = headers.get("authorization").map(|v| v.as_bytes().trim_ascii())
        && let Some(token) = v.strip_prefix(b"Bearer ").or_else(|| v.strip_prefix(b"bearer "))
        && !token.trim_ascii().is_empty()
    {
        return Some(("bearer", token.trim_ascii().to_vec(), vec![]));
    }
    if let Some(k) = get("x-api-key") {
        return Some(("bearer", k, vec![]));
    }
    get("x-wandb-api-key").map(|k| ("wandb", k, get("x-entity-id").unwrap_or_default()))
}

/// The principal a request speaks for (an opaque byte string compared in constant time), after
/// the server's key check: `UNAUTHENTICATED` when the server has a key and the request does not
/// carry it.
pub(crate) fn principal(headers: &HeaderMap, key: Option<&ApiKey>) -> Result<Vec<u8>, Status> {
    let cred = credential(headers);
    if let Some(key) = key {
        return match cred {
            Some((_, k, _)) if key.matches(&k) => Ok(b"key".to_vec()),
            Some(_) => Err(Status::new(grpc::UNAUTHENTICATED, "the API key is not this server's")),
            None => Err(Status::new(grpc::UNAUTHENTICATED, "no API key: send `authorization: Bearer KEY` (CWSANDBOX_API_KEY)")),
        };
    }
    Ok(match cred {
        Some((kind, k, entity)) => [kind.as_bytes(), b"\0", &k, b"\0", &entity].concat(),
        None => b"anonymous".to_vec(),
    })
}

/// Whether `image` is one this server provides: every sandbox runs on the server's own Python
/// (`version`, `3.11.7`), so `python`, `python:3`, `python:3.11`, `python:3.11.7` and their
/// variants (`python:3.11-slim`) are, with or without `docker.io/library/`; an empty image means
/// the server's. Anything else (another language, another Python, a digest) would silently run
/// on the wrong interpreter, so it is refused at creation.
pub(crate) fn check_image(image: &str, version: &str) -> Result<(), Status> {
    let image = image.trim();
    if image.is_empty() {
        return Ok(());
    }
    let bare = ["docker.io/library/", "index.docker.io/library/", "library/"].iter().find_map(|p| image.strip_prefix(p)).unwrap_or(image);
    let (name, tag) = bare.split_once(':').unwrap_or((bare, "3"));
    let wanted = tag.split('-').next().unwrap_or_default();
    let ours: Vec<&str> = version.split('.').collect();
    let asked: Vec<&str> = wanted.split('.').collect();
    let fits = name == "python" && !tag.contains('@') && !asked.is_empty() && asked.len() <= ours.len() && asked.iter().zip(&ours).all(|(a, o)| a == o);
    if fits {
        return Ok(());
    }
    let minor = ours.iter().take(2).copied().collect::<Vec<_>>().join(".");
    Err(Status::new(
        grpc::INVALID_ARGUMENT,
        format!("image `{image}` cannot be provided: rlx sandbox serve runs every sandbox on its own Python {version} (no images are pulled); ask for `python:{minor}`, `python:3` or `python`"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_keys_and_principals() {
        for ok in ["", "python", "python:3", "python:3.11", "python:3.11.7", "python:3.11-slim", "docker.io/library/python:3.11"] {
            assert!(check_image(ok, "3.11.7").is_ok(), "{ok}");
        }
        for bad in ["python:3.12", "python:3.11.8", "node:20", "ubuntu", "python:latest", "python:2", "ghcr.io/x/python:3.11", "python:3.11@sha256:ab"] {
            let e = check_image(bad, "3.11.7").unwrap_err();
            assert!(e.message.contains("python:3.11"), "{bad}: {}", e.message);
        }
        assert!(ApiKey::new(" ").is_err());
        let key = ApiKey::new("k1").unwrap();
        assert!(key.matches(b"k1") && !key.matches(b"k2") && !key.matches(b"k1k") && !key.matches(b""));
        let h = |pairs: &[(&'static str, &'static str)]| pairs.iter().map(|(k, v)| (hyper::header::HeaderName::from_static(k), v.parse().unwrap())).collect::<HeaderMap>();
        assert_eq!(principal(&h(&[("authorization", "Bearer k1")]), Some(&key)).unwrap(), b"key");
        assert_eq!(principal(&h(&[("authorization", "Bearer k2")]), Some(&key)).unwrap_err().code, grpc::UNAUTHENTICATED);
        assert_eq!(principal(&h(&[("authorization", "Bearer ")]), Some(&key)).unwrap_err().code, grpc::UNAUTHENTICATED);
        assert_eq!(principal(&h(&[]), Some(&key)).unwrap_err().code, grpc::UNAUTHENTICATED);
        let a = principal(&h(&[("authorization", "Bearer a")]), None).unwrap();
        let b = principal(&h(&[("authorization", "Bearer b")]), None).unwrap();
        assert_ne!(a, b);
        assert!(crate::http_server::same_secret(&a, &a.clone()) && !crate::http_server::same_secret(&a, &b));
    }
}
