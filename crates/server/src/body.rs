//! Request bodies of the inference and account routes: JSON read into a typed request, or the
//! text of a 400 that names the parameter that does not fit.
use serde::de::DeserializeOwned;

/// `body` as `T`, or why not: `invalid parameter <path>: <reason>` for a field of the wrong type
/// or value, `invalid parameters: ...` when the body as a whole is not JSON or not an object of
/// the right shape.
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if !inner.is_data() {
            format!("invalid parameters: the body is not JSON: {inner}")
        } else if path == "." {
            format!("invalid parameters: {inner}")
        } else {
            format!("invalid parameter {path}: {inner}")
        }
    })
}
