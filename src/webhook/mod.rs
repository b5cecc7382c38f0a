//! `kim webhook`: the HTTPS admission server (axum + rustls).
