-- Realms beyond pam/pve (ldap, ad, openid) can be added through the API;
-- their type-specific settings (server1, base_dn, issuer-url, ...) live in config.
ALTER TABLE realms DROP CONSTRAINT realms_type_check;
ALTER TABLE realms ADD COLUMN config jsonb NOT NULL DEFAULT '{}'::jsonb;
